"""The client: request building, the one HTTP exchange (whole or streamed), failures."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Final

import httpx
from httpx_sse import EventSource, SSEError

from polyloop.adapters.gateway._errors import (
    GatewayConnectionError,
    GatewayEmptyChoicesError,
    GatewayError,
    GatewayFinishReasonError,
    GatewayIncompleteStreamError,
    GatewayMalformedResponseError,
    GatewayStatusError,
    GatewayTimeoutError,
)
from polyloop.adapters.gateway._options import (
    _ascii_json,
    check_int,
    check_number,
    check_request_options,
    option_parameters,
)
from polyloop.adapters.gateway._redaction import Redactor, split_userinfo
from polyloop.adapters.gateway._reply import ReplyDraft
from polyloop.adapters.tool_calls import parse_tool_calls
from polyloop.errors import ConfigurationError
from polyloop.ports import ModelCall
from polyloop.types import Message, ModelReply, Role

__all__ = [
    "API_KEY_VARIABLE",
    "BINDING_HEADER",
    "BODY_EXCERPT_CHARS",
    "CALL_INDEX_HEADER",
    "GATEWAY_URL_VARIABLE",
    "MODEL_VARIABLE",
    "RESULT_ID_HEADER",
    "RUN_ID_HEADER",
    "GatewayModelClient",
]

logger = logging.getLogger("polyloop.adapters.gateway")

#: Header carrying ``ModelCall.binding`` as compact, sorted, ASCII-escaped JSON.
BINDING_HEADER: Final = "X-PolyLoop-Binding"
#: Header carrying ``ModelCall.run_id``.
RUN_ID_HEADER: Final = "X-PolyLoop-Run-Id"
#: Header carrying ``ModelCall.call_index`` (decimal).
CALL_INDEX_HEADER: Final = "X-PolyLoop-Call-Index"
#: Header carrying ``ModelCall.result_id`` (stable across resume: usable for deduplication).
RESULT_ID_HEADER: Final = "X-PolyLoop-Result-Id"

#: The environment variables :meth:`GatewayModelClient.from_environment` reads (the examples and
#: ``polyloop demo`` read the same ones): the API root, the model name, the API key.
GATEWAY_URL_VARIABLE: Final = "POLYLOOP_GATEWAY_URL"
MODEL_VARIABLE: Final = "POLYLOOP_MODEL"
API_KEY_VARIABLE: Final = "POLYLOOP_API_KEY"

#: How many characters of an error response body an error keeps.
BODY_EXCERPT_CHARS: Final = 500

#: Response headers a failed call keeps (a layer above backs off on them).
_KEPT_HEADER_PREFIXES: Final = ("retry-after", "x-ratelimit-", "ratelimit")
_MAX_KEPT_HEADERS: Final = 20
_STREAM_DONE: Final = "[DONE]"


def _messages_to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The wire form of a prompt (design 0013, native tool history: design 0046).

    An assistant message with a ``tool_call_id`` whose text holds exactly one well-formed call
    in the canonical form is sent with that call as its ``tool_calls`` (``content`` the text
    before it, ``""`` when none, never ``null``: design 0066), and a ``TOOL`` message answering
    it as ``{"role": "tool", "tool_call_id": ...}``. A tool message whose call could not be sent
    natively goes as a ``user`` message, so a server never sees a result without its call.
    """
    wire: list[dict[str, Any]] = []
    sent_calls: set[str] = set()
    for message in messages:
        text = "".join(block.text for block in message.content)
        call_id = message.tool_call_id
        if call_id is not None and message.role is Role.ASSISTANT:
            native = _native_call(text, call_id)
            if native is not None:
                wire.append(native)
                sent_calls.add(call_id)
                continue
        if call_id is not None and message.role is Role.TOOL:
            if call_id in sent_calls:
                wire.append({"role": "tool", "tool_call_id": call_id, "content": text})
                continue
            wire.append({"role": Role.USER.value, "content": text})
            continue
        wire.append({"role": message.role.value, "content": text})
    return wire


def _native_call(text: str, call_id: str) -> dict[str, Any] | None:
    found = parse_tool_calls(text)
    if found.problem is not None or len(found.calls) != 1:
        return None
    (call,) = found.calls
    arguments = (
        call.arguments
        if isinstance(call.arguments, str)
        else json.dumps(dict(call.arguments), ensure_ascii=False)
    )
    return {
        "role": Role.ASSISTANT.value,
        # Never null: OpenAI allows null beside tool_calls, but llama-cpp-python's server
        # refuses it (HTTP 500), and "" is accepted everywhere (design 0066).
        "content": found.content,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments},
            }
        ],
    }


def _header_safe(text: str) -> str:
    """Plain printable ASCII passes as is; anything else is sent as ASCII-escaped JSON text."""
    if text.isascii() and text.isprintable() and text == text.strip():
        return text
    return _ascii_json(text)[1:-1]


def _call_headers(call: ModelCall) -> dict[str, str]:
    """The ``X-PolyLoop-*`` headers of one call."""
    return {
        BINDING_HEADER: _ascii_json(dict(call.binding)),
        RUN_ID_HEADER: _header_safe(call.run_id),
        CALL_INDEX_HEADER: str(call.call_index),
        RESULT_ID_HEADER: _header_safe(call.result_id),
    }


def _kept_headers(headers: Mapping[str, str], redact: Redactor) -> dict[str, str]:
    """The response headers a failure keeps (lower-cased, redacted, at most a few)."""
    kept = {
        name.lower(): value
        for name, value in headers.items()
        if name.lower().startswith(_KEPT_HEADER_PREFIXES)
    }
    return {name: redact(kept[name]) for name in sorted(kept)[:_MAX_KEPT_HEADERS]}


def _kept_or_refused(
    reply: ModelReply,
    fail_on: frozenset[str],
    where: str,
    failure: Callable[..., GatewayError],
) -> ModelReply | GatewayError:
    """``reply``, or the :class:`GatewayFinishReasonError` (built by the client's ``failure``)
    when its finish reason is one of ``fail_on``."""
    reason = reply.finish_reason
    if reason is None or reason not in fail_on:
        return reply
    advice = " (cut off at max_tokens: raise it)" if reason == "length" else ""
    return failure(
        GatewayFinishReasonError,
        f"Model call to {where} ended with finish_reason {reason!r}{advice}; this client "
        "treats that as a failure (fail_on_finish_reasons).",
        finish_reason=reason,
        reply=reply,
    )


def _describe(error: BaseException) -> str:
    return str(error) or "no detail"


def _retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    milliseconds = headers.get("retry-after-ms")
    if milliseconds is not None:
        with contextlib.suppress(ValueError):
            return max(0.0, float(milliseconds) / 1000)
    value = headers.get("retry-after")
    if value is None:
        return None
    with contextlib.suppress(ValueError):
        return max(0.0, float(value))
    with contextlib.suppress(TypeError, ValueError, IndexError):
        moment = email.utils.parsedate_to_datetime(value)
        return max(0.0, moment.timestamp() - time.time())
    return None


_TIMEOUT_PHASES: Final[Mapping[type[BaseException], str]] = {
    httpx.ConnectTimeout: "connect",
    httpx.ReadTimeout: "read",
    httpx.WriteTimeout: "write",
    httpx.PoolTimeout: "pool",
}


class GatewayModelClient:
    """Calls ``POST {base_url}/chat/completions`` of an OpenAI-compatible gateway.

    ``base_url`` is the API root (``http://host:port/v1``). Sampling parameters left at
    ``None`` are not sent (the server's default applies, reported as ``unset`` by
    :meth:`parameters`). ``extra_body`` adds further fields to the request body (``top_k``,
    ``tool_choice``, ``reasoning_effort``…); they are reported by :meth:`parameters` too.
    ``extra_headers`` are sent with every request; only their names are reported, and their
    values are redacted from every text the client produces (values may hold credentials).

    ``native_tools=True`` sends the call's tools (``ModelCall.tools``: the request's current
    tools) as the body's ``tools`` list, for models trained on native tool calls; tool calls in
    the reply are always kept (see :mod:`polyloop.adapters.tool_calls`). Beside the tools go
    ``tool_choice`` when given (llama.cpp's server ignores ``tools`` unless it is sent) and
    ``parallel_tool_calls``: ``False`` by default, asking for at most one call per reply since
    a step executes one action (design 0045); ``None`` sends nothing, for servers that reject
    the field. Neither is sent in a request without tools. ``parameters()`` reports
    ``tool_choice`` when given and ``parallel_tool_calls`` when not the default, so snapshots
    recorded before these options existed stay valid. ``stream=True`` reads
    the reply as server-sent events (``stream_usage`` also asks for the usage chunk).
    ``fail_on_finish_reasons`` names finish reasons (``"length"``, ``"content_filter"``) that
    raise :class:`GatewayFinishReasonError` instead of returning the reply.

    ``timeout`` bounds each read, write and wait for a pooled connection (when streaming, each
    wait for the next bytes); ``connect_timeout`` bounds establishing a connection;
    ``deadline`` (``None``: none) bounds the whole call. They are not behaviours of the model,
    so none is in :meth:`parameters` (a resume may change them), and neither is ``stream``.

    Use it as an async context manager, or call :meth:`aclose` when done. The connection pool
    is created on the first call, so constructing a client does no I/O. Proxy variables and
    ``.netrc`` from the environment are ignored, and redirects are not followed: the request
    goes exactly where ``base_url`` says, with exactly the credentials given here.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 10.0,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        extra_body: Mapping[str, object] | None = None,
        extra_headers: Mapping[str, str] | None = None,
        binding_metadata: bool = False,
        max_connections: int = 100,
        native_tools: bool = False,
        stream: bool = False,
        stream_usage: bool = True,
        deadline: float | None = None,
        fail_on_finish_reasons: Collection[str] = (),
        tool_choice: str | Mapping[str, object] | None = None,
        parallel_tool_calls: bool | None = False,
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"GatewayModelClient base_url must start with http:// or https://, got "
                f"{split_userinfo(str(base_url)).url!r}; pass the API root, e.g. "
                "'http://127.0.0.1:8000/v1'."
            )
        if not isinstance(model, str) or not model:
            raise ConfigurationError("GatewayModelClient model must be a non-empty string.")
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigurationError("GatewayModelClient api_key must be a string or None.")
        for name, number in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            check_number("GatewayModelClient", name, number)
            if number is not None and number <= 0:
                raise ConfigurationError(
                    f"GatewayModelClient {name} must be > 0 seconds, got {number!r}."
                )
        check_int("GatewayModelClient", "max_connections", max_connections)
        if max_connections < 1:
            raise ConfigurationError("GatewayModelClient max_connections must be >= 1.")
        options = check_request_options(
            "GatewayModelClient",
            temperature=temperature,
            top_p=top_p,
            max_tokens=max_tokens,
            seed=seed,
            stop=stop,
            presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty,
            extra_body=extra_body,
            deadline=deadline,
            fail_on_finish_reasons=fail_on_finish_reasons,
            tool_choice=tool_choice,
            parallel_tool_calls=parallel_tool_calls,
        )
        headers = dict(extra_headers or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise ConfigurationError("GatewayModelClient extra_headers must map str to str.")

        public = split_userinfo(base_url.rstrip("/"))
        self._redact: Final = Redactor.for_client(api_key=api_key, headers=headers, url=public)
        # Userinfo travels as Basic credentials (as httpx would send it from the URL), never in
        # the URL itself: httpx logs request URLs, and every text shows only the public one.
        self._auth: Final = (
            httpx.BasicAuth(public.username, public.password)
            if public.username or public.password
            else None
        )
        self._base_url: Final = public.url
        self._url: Final = public.url + "/chat/completions"
        self._model: Final = model
        self._timeout: Final = float(timeout)
        self._connect_timeout: Final = float(connect_timeout)
        self._max_connections: Final = max_connections
        self._binding_metadata: Final = bool(binding_metadata)
        self._native_tools: Final = bool(native_tools)
        self._stream: Final = bool(stream)
        self._stream_usage: Final = bool(stream_usage)
        self._options: Final = options
        self._extra_header_names: Final = tuple(sorted(headers))
        # The key lives only inside this header mapping (httpx masks Authorization in reprs).
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers: Final[Mapping[str, str]] = MappingProxyType(headers)
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **options: Any
    ) -> GatewayModelClient:
        """A client for ``$POLYLOOP_GATEWAY_URL`` and ``$POLYLOOP_MODEL``, sending
        ``$POLYLOOP_API_KEY`` (when set) as the bearer token; ``options`` are passed on."""
        env = os.environ if environ is None else environ
        missing = [name for name in (GATEWAY_URL_VARIABLE, MODEL_VARIABLE) if not env.get(name)]
        if missing:
            raise ConfigurationError(
                f"GatewayModelClient.from_environment: {' and '.join(missing)} not set; set "
                f"{GATEWAY_URL_VARIABLE} (e.g. http://127.0.0.1:8000/v1) and {MODEL_VARIABLE}."
            )
        options.setdefault("api_key", env.get(API_KEY_VARIABLE) or None)
        return cls(env[GATEWAY_URL_VARIABLE], env[MODEL_VARIABLE], **options)

    # -- lifecycle -----------------------------------------------------------

    def _failure(self, kind: type[GatewayError], message: str, **details: Any) -> GatewayError:
        return kind(self._redact(message), base_url=self._base_url, model=self._model, **details)

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise self._failure(
                GatewayConnectionError,
                f"GatewayModelClient for {self._base_url} ({self._model}) is closed; "
                "create a new client.",
            )
        if self._client is None:
            self._client = httpx.AsyncClient(
                headers=dict(self._headers),
                timeout=httpx.Timeout(self._timeout, connect=self._connect_timeout),
                limits=httpx.Limits(
                    max_connections=self._max_connections,
                    max_keepalive_connections=self._max_connections,
                ),
                follow_redirects=False,
                trust_env=False,
                auth=self._auth,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the connection pool. Calls made afterwards raise :class:`GatewayConnectionError`."""
        self._closed = True
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    async def __aenter__(self) -> GatewayModelClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"GatewayModelClient(base_url={self._base_url!r}, model={self._model!r})"

    # -- the seam ------------------------------------------------------------

    def parameters(self) -> Mapping[str, str]:
        """``base_url`` (without userinfo), ``model``, every sampling parameter (``unset`` when
        not sent), each ``extra_body.<key>`` as JSON, the names of extra headers, the binding
        forwarding, and — only when switched on, so that earlier snapshots stay valid —
        ``native_tools`` and ``fail_on_finish_reasons``. Never the API key or header values.
        Synchronous, no I/O."""
        params: dict[str, str] = {
            "kind": "openai_chat_completions",
            "base_url": self._base_url,
            "model": self._model,
        }
        params.update(
            option_parameters(
                self._options,
                binding_metadata=self._binding_metadata,
                native_tools=self._native_tools,
                extra_header_names=self._extra_header_names,
            )
        )
        return params

    def _body(self, call: ModelCall) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": _messages_to_wire(call.messages),
            "stream": self._stream,
        }
        if self._stream and self._stream_usage:
            body["stream_options"] = {"include_usage": True}
        for name, value in self._options.sampling.items():
            if value is not None:
                body[name] = value
        body.update(self._options.extra_body)
        if self._binding_metadata:
            body["metadata"] = dict(call.binding)
        if self._native_tools and call.tools:
            body["tools"] = [{"type": "function", "function": dict(tool)} for tool in call.tools]
            # Only beside tools: OpenAI refuses both fields in a request without tools.
            if self._options.tool_choice is not None:
                body["tool_choice"] = self._options.tool_choice
            if self._options.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self._options.parallel_tool_calls
        return body

    async def call(self, call: ModelCall) -> ModelReply:
        """Make one chat-completions request and read the reply. Raises :class:`GatewayError`."""
        client = self._http()
        where = f"{self._url} (model {self._model!r}, run {call.run_id!r}, call {call.call_index})"
        started = time.monotonic()
        outcome: ModelReply | GatewayError
        try:
            async with self._within_deadline():
                outcome = await self._exchange(client, call, where)
        except TimeoutError:
            outcome = self._failure(
                GatewayTimeoutError,
                f"Model call to {where} did not finish within its deadline of "
                f"{self._options.deadline:g} s. Nothing was retried; raise the deadline or stream.",
                phase="deadline",
            )
        # Raised outside the except blocks: a transport exception (which holds the request and
        # its headers) must not travel along as __context__.
        if isinstance(outcome, GatewayError):
            logger.info("%s", outcome)
            raise outcome
        elapsed_ms = int((time.monotonic() - started) * 1000)
        logger.debug("model call %s: reply in %d ms", where, elapsed_ms)
        return outcome

    @contextlib.asynccontextmanager
    async def _within_deadline(self) -> AsyncIterator[None]:
        if self._options.deadline is None:
            yield
            return
        async with asyncio.timeout(self._options.deadline):
            yield

    async def _exchange(
        self, client: httpx.AsyncClient, call: ModelCall, where: str
    ) -> ModelReply | GatewayError:
        """The HTTP request and its reply, or the failure (returned, not raised)."""
        body, headers = self._body(call), _call_headers(call)
        try:
            if not self._stream:
                response = await client.post(self._url, json=body, headers=headers)
                return self._read_whole(response.status_code, response, response.text, where)
            async with client.stream("POST", self._url, json=body, headers=headers) as streamed:
                return await self._read_stream(streamed, where)
        except httpx.TimeoutException as error:
            phase = _TIMEOUT_PHASES.get(type(error), "read")
            limit = self._connect_timeout if phase == "connect" else self._timeout
            return self._failure(
                GatewayTimeoutError,
                f"Model call to {where} timed out while waiting to {phase} "
                f"(limit {limit:g} s). Nothing was retried; raise the timeout or check the "
                "gateway's load.",
                phase=phase,
            )
        except httpx.ConnectError as error:
            return self._failure(
                GatewayConnectionError,
                f"Could not connect for model call to {where}: {type(error).__name__}: "
                f"{_describe(error)}. Check that the gateway is running at {self._base_url}.",
            )
        except httpx.TransportError as error:
            return self._failure(
                GatewayConnectionError,
                f"The connection broke during model call to {where} before a complete response "
                f"was read: {type(error).__name__}: {_describe(error)}. Nothing was retried.",
            )
        except (httpx.DecodingError, SSEError) as error:
            return self._failure(
                GatewayMalformedResponseError,
                f"The response to model call {where} could not be decoded: {_describe(error)}.",
                body="",
            )

    # -- reading the reply ---------------------------------------------------------------

    def _excerpt(self, text: str) -> str:
        return self._redact(text)[:BODY_EXCERPT_CHARS]

    def _status_failure(self, response: httpx.Response, text: str, where: str) -> GatewayError:
        kept = _kept_headers(response.headers, self._redact)
        retry_after = _retry_after_seconds(kept)
        hint = "" if retry_after is None else f" The gateway asks to retry after {retry_after:g} s."
        return self._failure(
            GatewayStatusError,
            f"Model call to {where} failed with HTTP {response.status_code}: "
            f"{self._excerpt(text)!r}. Nothing was retried.{hint}",
            status_code=response.status_code,
            body=self._excerpt(text),
            headers=kept,
            retry_after_seconds=retry_after,
        )

    def _malformed(
        self, where: str, status: int, problem: str, text: str, *, empty: bool = False
    ) -> GatewayError:
        if empty:
            return self._failure(
                GatewayEmptyChoicesError,
                f"Model call to {where} returned HTTP {status} with an empty 'choices' list: "
                "the gateway produced no completion.",
                body=self._excerpt(text),
            )
        return self._failure(
            GatewayMalformedResponseError,
            f"Model call to {where} returned HTTP {status} with a body that is not a chat "
            f"completion ({problem}): {self._excerpt(text)!r}.",
            body=self._excerpt(text),
        )

    def _read_whole(
        self, status: int, response: httpx.Response, text: str, where: str
    ) -> ModelReply | GatewayError:
        if not 200 <= status < 300:
            return self._status_failure(response, text, where)
        try:
            payload = json.loads(text)
        except (ValueError, RecursionError):
            return self._malformed(where, status, "not JSON", text)
        if not isinstance(payload, dict):
            return self._malformed(where, status, f"JSON {type(payload).__name__}", text)
        choices = payload.get("choices")
        if isinstance(choices, list) and not choices:
            return self._malformed(where, status, "", text, empty=True)
        draft = ReplyDraft()
        problem = draft.add_completion(payload)
        if problem is not None:
            return self._malformed(where, status, problem, text)
        return self._finished(draft, where)

    async def _read_stream(self, response: httpx.Response, where: str) -> ModelReply | GatewayError:
        status = response.status_code
        if not 200 <= status < 300 or "text/event-stream" not in response.headers.get(
            "content-type", ""
        ):
            # An error, or a server that answered the whole completion at once.
            text = (await response.aread()).decode(response.encoding or "utf-8", "replace")
            return self._read_whole(status, response, text, where)
        draft = ReplyDraft()
        async for event in EventSource(response).aiter_sse():
            if event.data == _STREAM_DONE:
                return self._finished(draft, where)
            if not event.data.strip():
                continue
            try:
                chunk = json.loads(event.data)
            except (ValueError, RecursionError):
                return self._malformed(where, status, "a stream event is not JSON", event.data)
            problem = draft.add_chunk(chunk)
            if problem is not None:
                return self._malformed(where, status, problem, event.data)
        return self._failure(
            GatewayIncompleteStreamError,
            f"The stream of model call {where} ended without its 'data: {_STREAM_DONE}' "
            f"marker after {len(''.join(draft.text))} characters of content: the reply may be "
            "cut off. Nothing was retried.",
        )

    def _finished(self, draft: ReplyDraft, where: str) -> ModelReply | GatewayError:
        return _kept_or_refused(draft.reply(), self._options.fail_on, where, self._failure)
