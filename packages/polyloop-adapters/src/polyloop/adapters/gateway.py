"""A :class:`~polyloop.ports.ModelClient` for OpenAI-compatible chat-completions gateways.

One :class:`GatewayModelClient` owns one HTTP connection pool. It makes exactly one HTTP request
per :meth:`~GatewayModelClient.call`: no retries, no back-off, no rate limiting (the gateway
below owns those). Every failure raises a :class:`GatewayError`; a ``200`` whose message content
is empty is a valid reply (the model really said nothing), never a failure.

Wire mapping
    Each :class:`~polyloop.types.Message` becomes ``{"role": <role>, "content": <text>}`` where
    the text is its blocks concatenated without separator (character counts are preserved).
    ``choices[0].message.content`` becomes ``ModelReply.content`` (``null`` reads as ``""``);
    ``reasoning_content`` or, failing that, ``reasoning`` becomes ``ModelReply.thinking``; the
    response ``id`` becomes ``ModelReply.call_id`` (``None`` when missing or empty).

Forwarding of ``ModelCall.binding`` (the run's ``model_binding``)
    Always as one header, ``X-PolyLoop-Binding``, whose value is the binding as compact JSON
    with sorted keys and ASCII escapes (so any key or value survives, case included). Next to
    it, ``X-PolyLoop-Run-Id``, ``X-PolyLoop-Call-Index`` and ``X-PolyLoop-Result-Id`` identify
    the call (the result id is stable across a resume, so a gateway may deduplicate on it;
    the run id is sent as ASCII-escaped JSON string content when it is not plain ASCII).
    With ``binding_metadata=True`` the binding is also sent in the request body as the
    ``metadata`` object (OpenAI's field; some servers reject unknown body fields, hence opt-in).

Secrets
    The API key is sent only as ``Authorization: Bearer …``. It never appears in
    :meth:`~GatewayModelClient.parameters`, in a ``repr``, in a log line, or in an error or
    its chain: errors are raised outside the ``except`` block that caught the transport
    exception, so no third-party exception (which may hold the request) is attached.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType, TracebackType
from typing import Any, Final

import httpx

from polyloop.errors import ConfigurationError, PolyLoopError
from polyloop.ports import ModelCall
from polyloop.types import Message, ModelReply

__all__ = [
    "BINDING_HEADER",
    "CALL_INDEX_HEADER",
    "RESULT_ID_HEADER",
    "RUN_ID_HEADER",
    "GatewayConnectionError",
    "GatewayEmptyChoicesError",
    "GatewayError",
    "GatewayMalformedResponseError",
    "GatewayModelClient",
    "GatewayStatusError",
    "GatewayTimeoutError",
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

#: How many characters of an error response body an error keeps.
BODY_EXCERPT_CHARS: Final = 500

_RESERVED_BODY_KEYS: Final = frozenset({"model", "messages", "stream", "metadata"})


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class GatewayError(PolyLoopError):
    """A model call through the gateway failed. Nothing was retried.

    ``base_url`` and ``model`` say which endpoint failed; the message says what to check.
    """

    def __init__(self, message: str, *, base_url: str, model: str) -> None:
        super().__init__(message)
        self.base_url = base_url
        self.model = model


class GatewayConnectionError(GatewayError):
    """No response could be read: the connection was refused, reset, or closed mid-response."""


class GatewayTimeoutError(GatewayError):
    """A timeout elapsed. ``phase`` is ``connect``, ``read``, ``write`` or ``pool``."""

    def __init__(self, message: str, *, base_url: str, model: str, phase: str) -> None:
        super().__init__(message, base_url=base_url, model=model)
        self.phase = phase


class GatewayStatusError(GatewayError):
    """The gateway answered with a status other than 2xx (4xx/5xx; redirects are not followed).

    ``body`` holds the first 500 characters of the response body.
    """

    def __init__(
        self, message: str, *, base_url: str, model: str, status_code: int, body: str
    ) -> None:
        super().__init__(message, base_url=base_url, model=model)
        self.status_code = status_code
        self.body = body


class GatewayMalformedResponseError(GatewayError):
    """A success status, but the body is not chat-completions JSON (``choices[0].message``).

    ``body`` holds the first 500 characters of the response body.
    """

    def __init__(self, message: str, *, base_url: str, model: str, body: str) -> None:
        super().__init__(message, base_url=base_url, model=model)
        self.body = body


class GatewayEmptyChoicesError(GatewayMalformedResponseError):
    """A success status with ``"choices": []``: the gateway returned no completion at all."""


# ---------------------------------------------------------------------------
# The client
# ---------------------------------------------------------------------------


def _excerpt(text: str) -> str:
    return text[:BODY_EXCERPT_CHARS]


def _message_to_wire(message: Message) -> dict[str, str]:
    return {
        "role": message.role.value,
        "content": "".join(block.text for block in message.content),
    }


def _ascii_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _header_safe(text: str) -> str:
    """Plain printable ASCII passes as is; anything else is sent as ASCII-escaped JSON text."""
    if text.isascii() and text.isprintable() and text == text.strip():
        return text
    return _ascii_json(text)[1:-1]


def _check_number(name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigurationError(
            f"GatewayModelClient {name} must be a finite number or None, got {value!r}."
        )


def _check_int(name: str, value: int | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"GatewayModelClient {name} must be an int or None, got {value!r}."
        )


class GatewayModelClient:
    """Calls ``POST {base_url}/chat/completions`` of an OpenAI-compatible gateway.

    ``base_url`` is the API root (``http://host:port/v1``). Sampling parameters left at
    ``None`` are not sent (the server's default applies, reported as ``unset`` by
    :meth:`parameters`). ``extra_body`` adds further fields to the request body (``top_k``,
    ``reasoning_effort``…); they are reported by :meth:`parameters` too. ``extra_headers`` are
    sent with every request; only their names are reported (values may hold credentials).

    ``timeout`` bounds each read, write and wait for a pooled connection; ``connect_timeout``
    bounds establishing a connection. Neither is a behaviour of the model, so neither is in
    :meth:`parameters` (a resume may change them).

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
    ) -> None:
        if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
            raise ConfigurationError(
                f"GatewayModelClient base_url must start with http:// or https://, got "
                f"{base_url!r}; pass the API root, e.g. 'http://127.0.0.1:8000/v1'."
            )
        if not isinstance(model, str) or not model:
            raise ConfigurationError("GatewayModelClient model must be a non-empty string.")
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigurationError("GatewayModelClient api_key must be a string or None.")
        for name, number in (("timeout", timeout), ("connect_timeout", connect_timeout)):
            _check_number(name, number)
            if number <= 0:
                raise ConfigurationError(
                    f"GatewayModelClient {name} must be > 0 seconds, got {number!r}."
                )
        for name, value in (
            ("temperature", temperature),
            ("top_p", top_p),
            ("presence_penalty", presence_penalty),
            ("frequency_penalty", frequency_penalty),
        ):
            _check_number(name, value)
        _check_int("max_tokens", max_tokens)
        _check_int("seed", seed)
        _check_int("max_connections", max_connections)
        if max_connections < 1:
            raise ConfigurationError("GatewayModelClient max_connections must be >= 1.")
        if stop is not None and (
            isinstance(stop, str) or not all(isinstance(item, str) for item in stop)
        ):
            raise ConfigurationError(
                "GatewayModelClient stop must be a sequence of strings (not one string) or None."
            )
        body_extra = dict(extra_body or {})
        clash = sorted(_RESERVED_BODY_KEYS.intersection(body_extra))
        if clash:
            raise ConfigurationError(
                f"GatewayModelClient extra_body may not set {clash}: the client owns those fields."
            )
        try:
            json.dumps(body_extra)
        except (TypeError, ValueError) as error:
            raise ConfigurationError(
                f"GatewayModelClient extra_body must be JSON-serializable: {error}."
            ) from None
        headers = dict(extra_headers or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise ConfigurationError("GatewayModelClient extra_headers must map str to str.")

        self._base_url: Final = base_url.rstrip("/")
        self._url: Final = self._base_url + "/chat/completions"
        self._model: Final = model
        self._timeout: Final = float(timeout)
        self._connect_timeout: Final = float(connect_timeout)
        self._max_connections: Final = max_connections
        self._binding_metadata: Final = bool(binding_metadata)
        sampling: dict[str, object] = {
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_tokens,
            "seed": seed,
            "stop": list(stop) if stop is not None else None,
            "presence_penalty": presence_penalty,
            "frequency_penalty": frequency_penalty,
        }
        self._sampling: Final[Mapping[str, object]] = MappingProxyType(sampling)
        self._extra_body: Final[Mapping[str, object]] = MappingProxyType(body_extra)
        self._extra_header_names: Final = tuple(sorted(headers))
        # The key lives only inside this header mapping (httpx masks Authorization in reprs).
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._headers: Final[Mapping[str, str]] = MappingProxyType(headers)
        self._client: httpx.AsyncClient | None = None
        self._closed = False

    # -- lifecycle -----------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if self._closed:
            raise GatewayConnectionError(
                f"GatewayModelClient for {self._base_url} ({self._model}) is closed; "
                "create a new client.",
                base_url=self._base_url,
                model=self._model,
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
        """``base_url``, ``model``, every sampling parameter (``unset`` when not sent), each
        ``extra_body.<key>`` as JSON, the names of extra headers and the binding forwarding.
        Never the API key or header values. Synchronous, no I/O."""
        params: dict[str, str] = {
            "kind": "openai_chat_completions",
            "base_url": self._base_url,
            "model": self._model,
        }
        for name, value in self._sampling.items():
            params[name] = "unset" if value is None else _ascii_json(value)
        for name, value in sorted(self._extra_body.items()):
            params[f"extra_body.{name}"] = _ascii_json(value)
        params["extra_header_names"] = ",".join(self._extra_header_names)
        params["binding_forwarding"] = "header+metadata" if self._binding_metadata else "header"
        return params

    def _body(self, call: ModelCall) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [_message_to_wire(message) for message in call.messages],
            "stream": False,
        }
        for name, value in self._sampling.items():
            if value is not None:
                body[name] = value
        body.update(self._extra_body)
        if self._binding_metadata:
            body["metadata"] = dict(call.binding)
        return body

    def _call_headers(self, call: ModelCall) -> dict[str, str]:
        return {
            BINDING_HEADER: _ascii_json(dict(call.binding)),
            RUN_ID_HEADER: _header_safe(call.run_id),
            CALL_INDEX_HEADER: str(call.call_index),
            RESULT_ID_HEADER: _header_safe(call.result_id),
        }

    async def call(self, call: ModelCall) -> ModelReply:
        """Make one chat-completions request and read the reply. Raises :class:`GatewayError`."""
        client = self._http()
        where = f"{self._url} (model {self._model!r}, run {call.run_id!r}, call {call.call_index})"
        failure: GatewayError | None = None
        started = time.monotonic()
        try:
            response = await client.post(
                self._url, json=self._body(call), headers=self._call_headers(call)
            )
        except httpx.TimeoutException as error:
            phase = {
                httpx.ConnectTimeout: "connect",
                httpx.ReadTimeout: "read",
                httpx.WriteTimeout: "write",
                httpx.PoolTimeout: "pool",
            }.get(type(error), "read")
            limit = self._connect_timeout if phase == "connect" else self._timeout
            failure = GatewayTimeoutError(
                f"Model call to {where} timed out while waiting to {phase} "
                f"(limit {limit:g} s). Nothing was retried; raise the timeout or check the "
                "gateway's load.",
                base_url=self._base_url,
                model=self._model,
                phase=phase,
            )
        except httpx.ConnectError as error:
            failure = GatewayConnectionError(
                f"Could not connect for model call to {where}: {type(error).__name__}: "
                f"{_describe(error)}. Check that the gateway is running at {self._base_url}.",
                base_url=self._base_url,
                model=self._model,
            )
        except httpx.TransportError as error:
            failure = GatewayConnectionError(
                f"The connection broke during model call to {where} before a complete response "
                f"was read: {type(error).__name__}: {_describe(error)}. Nothing was retried.",
                base_url=self._base_url,
                model=self._model,
            )
        except httpx.DecodingError as error:
            failure = GatewayMalformedResponseError(
                f"The response to model call {where} could not be decoded: {_describe(error)}.",
                base_url=self._base_url,
                model=self._model,
                body="",
            )
        # Raised outside the except blocks: the httpx exception (which holds the request and
        # its headers) must not travel along as __context__.
        if failure is not None:
            logger.info("%s", failure)
            raise failure
        elapsed_ms = int((time.monotonic() - started) * 1000)
        logger.debug("model call %s: HTTP %d in %d ms", where, response.status_code, elapsed_ms)
        return self._reply(response, where)

    def _reply(self, response: httpx.Response, where: str) -> ModelReply:
        text = response.text
        if not 200 <= response.status_code < 300:
            raise GatewayStatusError(
                f"Model call to {where} failed with HTTP {response.status_code}: "
                f"{_excerpt(text)!r}. Nothing was retried.",
                base_url=self._base_url,
                model=self._model,
                status_code=response.status_code,
                body=_excerpt(text),
            )
        payload, problem = _decode(text)
        if problem is None:
            assert isinstance(payload, dict)
            choices = payload.get("choices")
            if isinstance(choices, list) and not choices:
                raise GatewayEmptyChoicesError(
                    f"Model call to {where} returned HTTP {response.status_code} with an empty "
                    "'choices' list: the gateway produced no completion.",
                    base_url=self._base_url,
                    model=self._model,
                    body=_excerpt(text),
                )
            reply, problem = _read_choice(payload)
            if reply is not None:
                return reply
        raise GatewayMalformedResponseError(
            f"Model call to {where} returned HTTP {response.status_code} with a body that is not "
            f"a chat completion ({problem}): {_excerpt(text)!r}.",
            base_url=self._base_url,
            model=self._model,
            body=_excerpt(text),
        )


def _describe(error: BaseException) -> str:
    return str(error) or "no detail"


def _decode(text: str) -> tuple[object, str | None]:
    try:
        payload = json.loads(text)
    except ValueError:
        return None, "not JSON"
    if not isinstance(payload, dict):
        return None, f"JSON {type(payload).__name__}, not an object"
    return payload, None


def _read_choice(payload: Mapping[str, Any]) -> tuple[ModelReply | None, str]:
    choices = payload.get("choices")
    if not isinstance(choices, list):
        return None, "no 'choices' list"
    first = choices[0]
    if not isinstance(first, Mapping) or not isinstance(first.get("message"), Mapping):
        return None, "no 'choices[0].message' object"
    message: Mapping[str, Any] = first["message"]
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        return None, f"'choices[0].message.content' is {type(content).__name__}, not a string"
    thinking = ""
    for field in ("reasoning_content", "reasoning"):
        value = message.get(field)
        if isinstance(value, str) and value:
            thinking = value
            break
    raw_id = payload.get("id")
    call_id = raw_id if isinstance(raw_id, str) and raw_id else None
    return ModelReply(call_id=call_id, content=content, thinking=thinking), ""
