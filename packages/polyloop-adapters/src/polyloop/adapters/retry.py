"""Retries and pacing for model calls, for every client (design 0065).

:class:`RetryingModelClient` wraps any :class:`~polyloop.ports.ModelClient` (the gateway, the
openai and LiteLLM clients, your own) and retries what is transient, paced by an optional
:class:`RateLimiter` shared by every episode of a batch in one process::

    LIMITER = RateLimiter(max_in_flight=32, requests_per_minute=500, tokens_per_minute=200_000)
    model = RetryingModelClient(GatewayModelClient(url, name), RetryPolicy(), limiter=LIMITER)

Transient (:func:`is_transient`): HTTP 429 and 5xx, connect and read timeouts, and a connection
refused, reset or cut mid-stream (:class:`~polyloop.adapters.gateway.GatewayConnectionError`);
any other 4xx, a malformed reply, a refused finish reason or the call's own ``deadline`` is
not. The wait before retry *n* is drawn from ``[b/2, b]`` with ``b = min(max_delay,
initial_delay * multiplier**(n-1))``, and never shorter than the server's ``Retry-After``. The
call gives up after ``max_attempts`` requests, or when the next wait would end past
``max_total_seconds`` from the call's start; then it raises :class:`ModelCallRetriesError`
naming the last failure, which the loop records as ``llm_error``. Cancellation passes at once,
also while waiting.

Every failed attempt is a WARNING on the ``polyloop.adapters.retry`` logger (a child of
``polyloop``) with the failure's own text, which the shipped clients have already redacted.
What each call cost is durable: a reply's ``usage`` gains ``polyloop.requests`` and
``polyloop.retries``, and an error raised after any retry carries them as ``usage``, which the
loop stores in ``ModelCallResult.failure_usage``. :meth:`RetryingModelClient.parameters` is the
wrapped client's, unchanged: retrying is transport, so a run may be resumed with another
policy (or none).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from polyloop.adapters.gateway._errors import (
    GatewayConnectionError,
    GatewayTimeoutError,
)
from polyloop.errors import ConfigurationError, PolyLoopError
from polyloop.ports import ModelCall, ModelClient
from polyloop.types import REQUESTS_USAGE_KEY, RETRIES_USAGE_KEY, ModelReply

__all__ = [
    "ModelCallRetriesError",
    "Pacer",
    "Permit",
    "RateLimiter",
    "RetryPolicy",
    "RetryingModelClient",
    "is_transient",
    "retry_after_of",
]

logger = logging.getLogger("polyloop.adapters.retry")

#: Timeout phases worth another attempt: the server was not reached, or was slow to answer.
_TRANSIENT_PHASES: Final = frozenset({"connect", "read"})


def _status_of(error: BaseException) -> int | None:
    status = getattr(error, "status_code", None)
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return None


def is_transient(error: BaseException) -> bool:
    """Whether another attempt may succeed: 429 or 5xx (any error with an int ``status_code``),
    a connect or read timeout, a failed or cut connection. Never another 4xx."""
    if isinstance(error, GatewayTimeoutError):
        return error.phase in _TRANSIENT_PHASES
    if isinstance(error, GatewayConnectionError):
        return True
    status = _status_of(error)
    if status is not None:
        return status == 429 or 500 <= status <= 599
    return False


def retry_after_of(error: BaseException) -> float | None:
    """The server's ``Retry-After`` in seconds (``retry_after_seconds``), if it sent one."""
    value = getattr(error, "retry_after_seconds", None)
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return max(0.0, float(value))
    return None


def _positive(owner: str, name: str, value: float, *, whole: bool = False) -> None:
    kind = int if whole else (int, float)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        raise ConfigurationError(f"{owner} {name} must be a finite number, got {value!r}.")
    if value <= 0:
        raise ConfigurationError(f"{owner} {name} must be > 0, got {value!r}.")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When to try a failed model call again, and how long to wait first."""

    #: Requests per call at most, the first included (1: never retry).
    max_attempts: int = 6
    #: The base wait before the first retry, in seconds; each retry multiplies it.
    initial_delay: float = 1.0
    multiplier: float = 2.0
    #: The base wait never grows past this (a ``Retry-After`` may ask for longer).
    max_delay: float = 60.0
    #: From the call's start: no retry whose wait would end later than this.
    max_total_seconds: float = 600.0

    def __post_init__(self) -> None:
        _positive("RetryPolicy", "max_attempts", self.max_attempts, whole=True)
        _positive("RetryPolicy", "initial_delay", self.initial_delay)
        _positive("RetryPolicy", "max_delay", self.max_delay)
        _positive("RetryPolicy", "max_total_seconds", self.max_total_seconds)
        if isinstance(self.multiplier, bool) or not isinstance(self.multiplier, int | float):
            raise ConfigurationError(
                f"RetryPolicy multiplier must be a number >= 1, got {self.multiplier!r}."
            )
        if not math.isfinite(self.multiplier) or self.multiplier < 1:
            raise ConfigurationError(
                f"RetryPolicy multiplier must be a number >= 1, got {self.multiplier!r}."
            )

    def base_delay(self, retry: int) -> float:
        """The upper end of the wait before retry ``retry`` (1 for the first retry)."""
        exponent = min(retry - 1, 1024)
        try:
            grown = self.initial_delay * self.multiplier**exponent
        except OverflowError:
            return self.max_delay
        return min(self.max_delay, grown)

    def delay(self, retry: int, retry_after: float | None, draw: float) -> float:
        """The wait before retry ``retry``: ``draw`` (in ``[0, 1]``) places it in the upper half
        of the base, and it is never shorter than ``retry_after``."""
        base = self.base_delay(retry)
        jittered = base / 2 + base / 2 * min(1.0, max(0.0, draw))
        return jittered if retry_after is None else max(jittered, retry_after)

    def next_wait(
        self, error: BaseException, attempts: int, elapsed: float, draw: float
    ) -> tuple[float | None, str]:
        """After ``attempts`` requests and ``elapsed`` seconds, ending in ``error``: the wait
        before the next request, or ``None`` and why not (``not transient``, ``attempts``,
        ``time``)."""
        if not is_transient(error):
            return None, "not transient"
        if attempts >= self.max_attempts:
            return None, "attempts"
        wait = self.delay(attempts, retry_after_of(error), draw)
        if elapsed + wait > self.max_total_seconds:
            return None, "time"
        return wait, ""


class ModelCallRetriesError(PolyLoopError):
    """A model call failed after retrying: attempts or time ran out, or a failure after a retry
    was not transient. ``last_failure`` is the last attempt's error; ``usage`` holds
    ``polyloop.requests`` and ``polyloop.retries`` (stored with the call's failure)."""

    def __init__(
        self,
        message: str,
        *,
        last_failure: BaseException,
        requests: int,
        elapsed_seconds: float,
        reason: str,
    ) -> None:
        super().__init__(message)
        self.last_failure = last_failure
        self.requests = requests
        self.retries = requests - 1
        self.elapsed_seconds = elapsed_seconds
        self.reason = reason
        self.usage: Mapping[str, int] = {
            REQUESTS_USAGE_KEY: requests,
            RETRIES_USAGE_KEY: requests - 1,
        }


def _tokens_of(reply: ModelReply) -> int:
    usage = reply.usage or {}
    if "total_tokens" in usage:
        return usage["total_tokens"]
    return usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)


class RetryingModelClient:
    """A :class:`~polyloop.ports.ModelClient` that retries the wrapped one's transient failures
    under ``policy``, each request paced by ``limiter`` when given. ``parameters()`` is the
    wrapped client's. Do not wrap a retrying client in another (counts would not add up)."""

    def __init__(
        self,
        client: ModelClient,
        policy: RetryPolicy | None = None,
        *,
        limiter: RateLimiter | None = None,
        random_draw: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not callable(getattr(client, "call", None)) or not callable(
            getattr(client, "parameters", None)
        ):
            raise ConfigurationError(
                f"RetryingModelClient wraps a ModelClient (call and parameters), got "
                f"{type(client).__name__}."
            )
        self._client: Final = client
        self._policy: Final = policy if policy is not None else RetryPolicy()
        self._limiter: Final = limiter
        self._draw: Final = random_draw
        self._sleep: Final = sleep
        self._clock: Final = clock

    @property
    def wrapped(self) -> ModelClient:
        return self._client

    @property
    def policy(self) -> RetryPolicy:
        return self._policy

    def __repr__(self) -> str:
        return f"RetryingModelClient({self._client!r}, {self._policy!r})"

    def parameters(self) -> Mapping[str, str]:
        return self._client.parameters()

    async def _attempt(self, call: ModelCall) -> ModelReply | Exception | object:
        async with contextlib.AsyncExitStack() as stack:
            permit = None
            if self._limiter is not None:
                permit = await stack.enter_async_context(self._limiter.request())
            try:
                reply = await self._client.call(call)
            except Exception as error:  # judged below, outside this block
                return error
            if permit is not None and isinstance(reply, ModelReply):
                permit.charge(_tokens_of(reply))
            return reply
        raise AssertionError("unreachable")  # pragma: no cover

    async def call(self, call: ModelCall) -> ModelReply:
        started = self._clock()
        requests = 0
        while True:
            requests += 1
            outcome = await self._attempt(call)
            if isinstance(outcome, ModelReply):
                return _counted(outcome, requests)
            if not isinstance(outcome, Exception):
                return outcome  # type: ignore[return-value]  # the loop records this mistake
            elapsed = self._clock() - started
            wait, reason = self._policy.next_wait(outcome, requests, elapsed, self._draw())
            if wait is None:
                if requests == 1 and reason == "not transient":
                    raise outcome
                raise self._gave_up(call, outcome, requests, elapsed, reason)
            logger.warning(
                "polyloop: model call %d of run %r: attempt %d of %d failed (%s: %s); "
                "retrying in %.2f s",
                call.call_index,
                call.run_id,
                requests,
                self._policy.max_attempts,
                type(outcome).__name__,
                outcome,
                wait,
            )
            retry_after = retry_after_of(outcome)
            if self._limiter is not None and retry_after is not None and _status_of(outcome) == 429:
                self._limiter.pause(retry_after)
            await self._sleep(wait)

    def _gave_up(
        self, call: ModelCall, last: Exception, requests: int, elapsed: float, reason: str
    ) -> ModelCallRetriesError:
        why = {
            "attempts": f"at most {self._policy.max_attempts} attempts",
            "time": f"the next wait would pass max_total_seconds={self._policy.max_total_seconds:g}",
            "not transient": "the last failure is not transient",
        }[reason]
        message = (
            f"model call {call.call_index} of run {call.run_id!r} failed after {requests} "
            f"request(s) ({requests - 1} retries, {elapsed:.1f} s; {why}); last failure: "
            f"{type(last).__name__}: {last}"
        )
        logger.warning("polyloop: %s", message)
        return ModelCallRetriesError(
            message, last_failure=last, requests=requests, elapsed_seconds=elapsed, reason=reason
        )


def _counted(reply: ModelReply, requests: int) -> ModelReply:
    usage = dict(reply.usage or {})
    usage[REQUESTS_USAGE_KEY] = requests
    usage[RETRIES_USAGE_KEY] = requests - 1
    return replace(reply, usage=usage)


# -- pacing ---------------------------------------------------------------------------------


class Pacer:
    """The limiter's decisions, without waiting (a hypothesis property checks them).

    Requests: each start is at least ``60 / requests_per_minute`` s after the previous one, so
    a minute's budget is spread evenly, never spent in one burst. Tokens: a clock of tokens paid
    for; a request starts only once every token charged before it is paid at
    ``tokens_per_minute``, and reserves the mean tokens per request seen so far, settled to the
    real count when its reply arrives. A pause (a 429's ``Retry-After``) holds every start.
    """

    __slots__ = (
        "_charged",
        "_last_start",
        "_next_request",
        "_paused_until",
        "_request_gap",
        "_settled_requests",
        "_token_clock",
        "_token_gap",
    )

    def __init__(self, requests_per_minute: float | None, tokens_per_minute: float | None) -> None:
        self._request_gap = 0.0 if requests_per_minute is None else 60.0 / requests_per_minute
        self._token_gap = 0.0 if tokens_per_minute is None else 60.0 / tokens_per_minute
        self._next_request = -math.inf
        self._last_start = -math.inf
        self._token_clock = -math.inf
        self._paused_until = -math.inf
        self._charged = 0
        self._settled_requests = 0

    def estimate(self) -> int:
        """Tokens a request is expected to use: the mean so far (0 before any reply)."""
        if self._settled_requests == 0:
            return 0
        return round(self._charged / self._settled_requests)

    def reserve(self, now: float) -> tuple[float, int]:
        """The start time of a request asked for at ``now``, and the tokens reserved for it."""
        start = max(now, self._next_request, self._token_clock, self._paused_until)
        self._next_request = start + self._request_gap
        reserved = self.estimate() if self._token_gap else 0
        self._token_clock = start + reserved * self._token_gap
        return start, reserved

    def admit(self, now: float) -> float:
        """At a reserved start, reached at ``now``: ``0.0`` when the request may go (its start
        is recorded), else how much longer it must wait. A busy event loop wakes sleepers late
        and together; this keeps the real starts, not only the planned ones, ``60 / rpm``
        apart, and moves the plan along when it fell behind."""
        earliest = self._last_start + self._request_gap
        if now < earliest:
            return earliest - now
        self._last_start = now
        self._next_request = max(self._next_request, now + self._request_gap)
        return 0.0

    def settle(self, reserved: int, tokens: int) -> None:
        """A reply used ``tokens`` where ``reserved`` were set aside."""
        self._charged += tokens
        self._settled_requests += 1
        if self._token_gap:
            self._token_clock += (tokens - reserved) * self._token_gap

    def pause(self, until: float) -> None:
        self._paused_until = max(self._paused_until, until)


class Permit:
    """One request's place under a :class:`RateLimiter`; :meth:`charge` its tokens."""

    __slots__ = ("_charged", "_pacer", "_reserved")

    def __init__(self, pacer: Pacer, reserved: int) -> None:
        self._pacer = pacer
        self._reserved = reserved
        self._charged = False

    def charge(self, tokens: int) -> None:
        if not self._charged:
            self._charged = True
            self._pacer.settle(self._reserved, max(0, tokens))


class RateLimiter:
    """Requests in flight, and requests and tokens per minute paced evenly, shared by every
    client given it in one process (one event loop). Under Ray each worker process has its own:
    give each worker its share of the provider's limits (limit / workers).

    ``pause_on_429``: a 429's ``Retry-After`` holds every start of the limiter (the provider's
    limit is shared by all episodes); switch it off for a server whose 429s do not depend on
    the load."""

    def __init__(
        self,
        *,
        max_in_flight: int | None = None,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        pause_on_429: bool = True,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if max_in_flight is not None:
            _positive("RateLimiter", "max_in_flight", max_in_flight, whole=True)
        for name, value in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        ):
            if value is not None:
                _positive("RateLimiter", name, value)
        self.max_in_flight: Final = max_in_flight
        self.requests_per_minute: Final = requests_per_minute
        self.tokens_per_minute: Final = tokens_per_minute
        self.pause_on_429: Final = bool(pause_on_429)
        self._pacer: Final = Pacer(requests_per_minute, tokens_per_minute)
        self._slots: asyncio.Semaphore | None = (
            None if max_in_flight is None else asyncio.Semaphore(max_in_flight)
        )
        self._clock: Final = clock
        self._sleep: Final = sleep
        #: Requests in flight now, and the most at once so far.
        self.in_flight = 0
        self.most_in_flight = 0

    def __repr__(self) -> str:
        return (
            f"RateLimiter(max_in_flight={self.max_in_flight}, "
            f"requests_per_minute={self.requests_per_minute}, "
            f"tokens_per_minute={self.tokens_per_minute})"
        )

    def pause(self, seconds: float) -> None:
        """Hold every start for ``seconds`` from now (a 429's ``Retry-After``), unless
        ``pause_on_429`` is off."""
        if self.pause_on_429:
            self._pacer.pause(self._clock() + max(0.0, seconds))

    @contextlib.asynccontextmanager
    async def request(self) -> AsyncIterator[Permit]:
        """Wait for a place in flight and the request's paced start; hold it for the request."""
        async with contextlib.AsyncExitStack() as stack:
            if self._slots is not None:
                await stack.enter_async_context(self._slots)
            now = self._clock()
            start, reserved = self._pacer.reserve(now)
            wait = start - now
            while wait > 0:
                await self._sleep(wait)
                wait = self._pacer.admit(self._clock())
            if start <= now:
                self._pacer.admit(now)
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                yield Permit(self._pacer, reserved)
            finally:
                self.in_flight -= 1
