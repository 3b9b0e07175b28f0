"""The retry policy's and the limiter's decisions, as properties: which failures are transient,
the back-off schedule, the caps, and even pacing of requests and tokens."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyloop.adapters.gateway import (
    GatewayConnectionError,
    GatewayFinishReasonError,
    GatewayIncompleteStreamError,
    GatewayMalformedResponseError,
    GatewayStatusError,
    GatewayTimeoutError,
)
from polyloop.adapters.retry import Pacer, RateLimiter, RetryPolicy, is_transient, retry_after_of
from polyloop.errors import ConfigurationError
from polyloop.types import ModelReply

WHERE = {"base_url": "http://127.0.0.1:1/v1", "model": "m"}

policies = st.builds(
    RetryPolicy,
    max_attempts=st.integers(1, 20),
    initial_delay=st.floats(0.001, 10),
    multiplier=st.floats(1, 5),
    max_delay=st.floats(0.001, 120),
    max_total_seconds=st.floats(0.01, 3600),
)
draws = st.floats(0, 1)
retry_afters = st.none() | st.floats(0, 1000)


def status_error(status: int, retry_after: float | None = None) -> GatewayStatusError:
    return GatewayStatusError(
        "failed", **WHERE, status_code=status, body="", retry_after_seconds=retry_after
    )


@given(st.integers(400, 599))
def test_429_and_5xx_are_transient_no_other_4xx_is(status: int) -> None:
    assert is_transient(status_error(status)) == (status == 429 or status >= 500)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (GatewayTimeoutError("t", **WHERE, phase="connect"), True),
        (GatewayTimeoutError("t", **WHERE, phase="read"), True),
        (GatewayTimeoutError("t", **WHERE, phase="write"), False),
        (GatewayTimeoutError("t", **WHERE, phase="pool"), False),
        (GatewayTimeoutError("t", **WHERE, phase="deadline"), False),
        (GatewayConnectionError("refused", **WHERE), True),
        (GatewayIncompleteStreamError("cut", **WHERE), True),
        (GatewayMalformedResponseError("bad", **WHERE, body=""), False),
        (
            GatewayFinishReasonError(
                "cut", **WHERE, finish_reason="length", reply=ModelReply(None, "", "")
            ),
            False,
        ),
        (ValueError("a bug"), False),
    ],
)
def test_which_failures_are_transient(error: Exception, transient: bool) -> None:
    assert is_transient(error) is transient


@given(policies, st.integers(1, 200), retry_afters, draws)
def test_a_wait_is_within_the_jittered_base_and_never_before_retry_after(
    policy: RetryPolicy, retry: int, retry_after: float | None, draw: float
) -> None:
    base = policy.base_delay(retry)
    wait = policy.delay(retry, retry_after, draw)
    assert 0 < base <= policy.max_delay
    if retry_after is None:
        assert base / 2 <= wait <= base
    else:
        assert wait >= retry_after
        assert wait <= max(base, retry_after)


@given(policies, st.integers(1, 200))
def test_the_base_grows_exponentially_up_to_the_cap(policy: RetryPolicy, retry: int) -> None:
    assert policy.base_delay(retry + 1) >= policy.base_delay(retry)
    expected = min(policy.max_delay, policy.initial_delay * policy.multiplier ** (retry - 1))
    assert math.isclose(policy.base_delay(retry), expected, rel_tol=1e-9)


@given(policies, st.integers(400, 599), st.integers(1, 30), st.floats(0, 4000), retry_afters, draws)
def test_the_next_wait_respects_every_cap(
    policy: RetryPolicy,
    status: int,
    attempts: int,
    elapsed: float,
    retry_after: float | None,
    draw: float,
) -> None:
    error = status_error(status, retry_after)
    wait, reason = policy.next_wait(error, attempts, elapsed, draw)
    if not is_transient(error):
        assert (wait, reason) == (None, "not transient")
    elif attempts >= policy.max_attempts:
        assert (wait, reason) == (None, "attempts")
    elif elapsed + policy.delay(attempts, retry_after, draw) > policy.max_total_seconds:
        assert (wait, reason) == (None, "time")
    else:
        assert wait == policy.delay(attempts, retry_after, draw)
        assert elapsed + wait <= policy.max_total_seconds


def test_retry_after_is_read_from_the_error() -> None:
    assert retry_after_of(status_error(429, 2.5)) == 2.5
    assert retry_after_of(status_error(429)) is None
    assert retry_after_of(ValueError()) is None


@pytest.mark.parametrize(
    "bad",
    [
        {"max_attempts": 0},
        {"max_attempts": 2.5},
        {"initial_delay": 0},
        {"multiplier": 0.5},
        {"max_total_seconds": math.inf},
    ],
)
def test_a_nonsensical_policy_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ConfigurationError):
        RetryPolicy(**bad)  # type: ignore[arg-type]


# -- pacing ---------------------------------------------------------------------------------

arrival_gaps = st.lists(st.floats(0, 5), min_size=1, max_size=60)


@given(st.floats(1, 6000), arrival_gaps)
def test_requests_are_spaced_evenly_never_a_burst(rpm: float, gaps: list[float]) -> None:
    """Each start is at least 60/rpm after the previous one and never before its request, so
    no 60-second window holds more than rpm starts, however the requests arrive."""
    pacer = Pacer(rpm, None)
    now, starts = 0.0, []
    for gap in gaps:
        now += gap
        start, _ = pacer.reserve(now)
        assert start >= now
        starts.append(start)
    spacing = 60 / rpm
    for earlier, later in itertools.pairwise(starts):
        assert later - earlier >= spacing * (1 - 1e-9)
    for index, first in enumerate(starts):
        # A start exactly 60 s later belongs to the next window (up to float rounding).
        within = [s for s in starts[index:] if s < first + 60 * (1 - 1e-9)]
        assert len(within) <= math.ceil(rpm)


@given(
    st.floats(1, 6000),
    st.lists(st.tuples(st.floats(0, 2), st.floats(0, 3), st.floats(0, 1)), min_size=1, max_size=60),
)
def test_starts_stay_spaced_when_the_event_loop_wakes_sleepers_late(
    rpm: float, requests: list[tuple[float, float, float]]
) -> None:
    """Each request sleeps to its reserved start but wakes late (a busy loop), several at
    once: the starts admitted, in the order the loop runs them, are still 60/rpm apart."""
    pacer = Pacer(rpm, None)
    now, wakes = 0.0, []
    for index, (gap, lag, again) in enumerate(requests):
        now += gap
        start, _ = pacer.reserve(now)
        heapq.heappush(wakes, (start + lag, index, again))
    starts = []
    while wakes:
        wake, index, again = heapq.heappop(wakes)
        wait = pacer.admit(wake)
        if wait:
            heapq.heappush(wakes, (wake + wait + again, index, again))
        else:
            starts.append(wake)
    assert len(starts) == len(requests)
    for earlier, later in itertools.pairwise(starts):
        assert later - earlier >= 60 / rpm * (1 - 1e-9)


@given(
    st.floats(100, 1_000_000),
    st.lists(st.tuples(st.floats(0, 5), st.integers(0, 5000)), min_size=1, max_size=60),
)
def test_tokens_are_paid_for_before_the_next_request(
    tpm: float, requests: list[tuple[float, int]]
) -> None:
    """Requests one after another (each settled before the next): a request starts only once
    the tokens of those before it are paid at tpm, so the tokens started in any window, but
    the last request's, fit the window's share of the budget."""
    pacer = Pacer(None, tpm)
    now, started = 0.0, []
    for gap, tokens in requests:
        now += gap
        start, reserved = pacer.reserve(now)
        assert start >= now
        pacer.settle(reserved, tokens)
        started.append((start, tokens))
        now = start
    for index, (first, _) in enumerate(started):
        for end in range(index + 1, len(started)):
            span = started[end][0] - first
            paid = sum(tokens for _, tokens in started[index:end])
            assert paid <= tpm * span / 60 + 1e-6 * max(1.0, paid)


@given(st.floats(0, 100), st.floats(0, 100))
def test_a_pause_holds_every_start(now: float, pause: float) -> None:
    pacer = Pacer(None, None)
    pacer.pause(now + pause)
    start, _ = pacer.reserve(now)
    assert start >= now + pause


def test_the_token_reservation_is_the_mean_so_far() -> None:
    pacer = Pacer(None, 60_000)
    assert pacer.reserve(0.0) == (0.0, 0)
    pacer.settle(0, 100)
    _, reserved = pacer.reserve(10.0)
    assert reserved == 100
    pacer.settle(reserved, 300)
    assert pacer.estimate() == 200


async def test_the_limiter_holds_requests_in_flight_and_paces_starts() -> None:
    """20 tasks through max_in_flight=3 and 1,200 requests a minute (one per 50 ms)."""
    limiter = RateLimiter(max_in_flight=3, requests_per_minute=1200)
    starts: list[float] = []

    async def request() -> None:
        async with limiter.request() as permit:
            starts.append(time.monotonic())
            assert limiter.in_flight <= 3
            await asyncio.sleep(0.02)
            permit.charge(10)

    await asyncio.gather(*(request() for _ in range(20)))
    assert limiter.most_in_flight <= 3
    assert limiter.in_flight == 0
    starts.sort()
    # The n-th start is scheduled n x 50 ms after the first and a sleep never ends early (a
    # busy machine may only start it later): no burst, whatever the load.
    for index, start in enumerate(starts):
        assert start - starts[0] >= index * 0.05 - 0.001
