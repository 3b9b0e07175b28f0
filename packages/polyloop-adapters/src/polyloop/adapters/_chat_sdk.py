"""What the model clients over a chat-completions SDK share (design 0064).

:class:`~polyloop.adapters.openai_client.OpenAIModelClient` and
:class:`~polyloop.adapters.litellm_client.LiteLLMModelClient` send the gateway's request (the
same wire messages, tools, sampling and binding headers: :mod:`polyloop.adapters.gateway`) and
read the answer, whole or streamed, through the gateway's own :class:`ReplyDraft`, so the three
clients map a reply identically. Their failures are the gateway's errors
(:class:`~polyloop.adapters.gateway.GatewayError` and its subclasses), built from the SDK's
exception outside the ``except`` block that caught it and redacted, so no SDK exception (which
holds the request, credentials included) travels along, and the retry policy of
:mod:`polyloop.adapters.retry` reads one hierarchy whichever client failed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final, TypedDict
from urllib.parse import urlsplit, urlunsplit

from polyloop.adapters.gateway._client import (
    BODY_EXCERPT_CHARS,
    _call_headers,
    _kept_headers,
    _kept_or_refused,
    _messages_to_wire,
    _retry_after_seconds,
)
from polyloop.adapters.gateway._errors import (
    GatewayConnectionError,
    GatewayError,
    GatewayIncompleteStreamError,
    GatewayMalformedResponseError,
    GatewayStatusError,
    GatewayTimeoutError,
)
from polyloop.adapters.gateway._options import check_request_options, option_parameters
from polyloop.adapters.gateway._redaction import Redactor, split_userinfo
from polyloop.adapters.gateway._reply import ReplyDraft
from polyloop.ports import ModelCall
from polyloop.types import ModelReply

__all__ = [
    "ChatOptionArguments",
    "ChatOptions",
    "SdkChatClient",
    "chat_options",
    "plain_payload",
    "public_endpoint",
]


def public_endpoint(url: str) -> str:
    """``url`` without userinfo, query or fragment, and without a trailing ``/``."""
    parts = urlsplit(split_userinfo(url).url)
    return urlunsplit(parts._replace(query="", fragment="")).rstrip("/")


def plain_payload(value: object) -> object:
    """An SDK's response object as plain JSON-like data (pydantic's ``model_dump``)."""
    if isinstance(value, Mapping):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump()
    return value


class ChatOptionArguments(TypedDict, total=False):
    """The keyword arguments of the gateway (:class:`~polyloop.adapters.gateway.GatewayModelClient`)
    that an SDK-backed client takes too, with the same meaning and defaults (:class:`ChatOptions`
    holds the defaults)."""

    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    seed: int | None
    stop: Sequence[str] | None
    presence_penalty: float | None
    frequency_penalty: float | None
    extra_body: Mapping[str, object] | None
    binding_metadata: bool
    native_tools: bool
    stream: bool
    stream_usage: bool
    deadline: float | None
    fail_on_finish_reasons: Collection[str]
    tool_choice: str | Mapping[str, object] | None
    parallel_tool_calls: bool | None


class ChatOptions:
    """The gateway's request options an SDK-backed client honours, checked as the gateway
    checks them (same messages). Transport options (timeouts, connection pool, static headers,
    proxies) belong to the SDK's own client and are not repeated here."""

    __slots__ = ("binding_metadata", "checked", "native_tools", "stream", "stream_usage")

    def __init__(
        self,
        owner: str,
        *,
        temperature: float | None = None,
        top_p: float | None = None,
        max_tokens: int | None = None,
        seed: int | None = None,
        stop: Sequence[str] | None = None,
        presence_penalty: float | None = None,
        frequency_penalty: float | None = None,
        extra_body: Mapping[str, object] | None = None,
        binding_metadata: bool = False,
        native_tools: bool = False,
        stream: bool = False,
        stream_usage: bool = True,
        deadline: float | None = None,
        fail_on_finish_reasons: Collection[str] = (),
        tool_choice: str | Mapping[str, object] | None = None,
        parallel_tool_calls: bool | None = False,
    ) -> None:
        checked = check_request_options(
            owner,
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
        self.checked: Final = checked
        self.binding_metadata: Final = bool(binding_metadata)
        self.native_tools: Final = bool(native_tools)
        self.stream: Final = bool(stream)
        self.stream_usage: Final = bool(stream_usage)

    def parameters(self) -> dict[str, str]:
        """The gateway's names and rules: sampling (``unset`` when not sent), ``extra_body.*``,
        the binding forwarding, and the tool options only when not their defaults."""
        return option_parameters(
            self.checked, binding_metadata=self.binding_metadata, native_tools=self.native_tools
        )

    def request(self, call: ModelCall) -> dict[str, Any]:
        """The keyword arguments of one SDK call: everything but ``model`` and transport."""
        arguments: dict[str, Any] = {
            "messages": _messages_to_wire(call.messages),
            "stream": self.stream,
        }
        if self.stream and self.stream_usage:
            arguments["stream_options"] = {"include_usage": True}
        for name, value in self.checked.sampling.items():
            if value is not None:
                arguments[name] = value
        if self.native_tools and call.tools:
            arguments["tools"] = [
                {"type": "function", "function": dict(tool)} for tool in call.tools
            ]
            if self.checked.tool_choice is not None:
                arguments["tool_choice"] = self.checked.tool_choice
            if self.checked.parallel_tool_calls is not None:
                arguments["parallel_tool_calls"] = self.checked.parallel_tool_calls
        body = dict(self.checked.extra_body)
        if self.binding_metadata:
            body["metadata"] = dict(call.binding)
        if body:
            arguments["extra_body"] = body
        arguments["extra_headers"] = _call_headers(call)
        return arguments


def chat_options(owner: str, options: ChatOptionArguments) -> ChatOptions:
    """The options a client was given as ``**options``; an unknown name is refused as Python
    refuses it in a signature, naming the client rather than :class:`ChatOptions`."""
    for name in options:
        if name not in ChatOptionArguments.__optional_keys__:
            raise TypeError(f"{owner}.__init__() got an unexpected keyword argument {name!r}")
    return ChatOptions(owner, **options)


class SdkChatClient:
    """The call path shared by the SDK-backed clients: deadline, whole or streamed reading,
    finish-reason refusal, redacted errors raised outside any ``except`` block."""

    #: The client's name in messages (``OpenAIModelClient``).
    owner: str = "SdkChatClient"

    def __init__(self, options: ChatOptions, *, model: str, endpoint: str, redact: Redactor):
        self._options: Final = options
        self._model: Final = model
        #: Where the calls go, without userinfo or query (for errors and ``parameters()``).
        self._endpoint: Final = endpoint
        self._redact: Final = redact

    # -- hooks of each client ------------------------------------------------------------

    async def _create(self, arguments: dict[str, Any]) -> object:
        """Start one SDK call: a whole response, or an async iterator of chunks."""
        raise NotImplementedError

    def _translate(self, error: Exception, where: str) -> GatewayError | None:
        """The gateway error for an SDK exception, or ``None`` to let it propagate."""
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------

    def _failure(self, kind: type[GatewayError], message: str, **details: Any) -> GatewayError:
        return kind(self._redact(message), base_url=self._endpoint, model=self._model, **details)

    def _excerpt(self, text: str) -> str:
        return self._redact(text)[:BODY_EXCERPT_CHARS]

    def status_failure(
        self, where: str, status: int, body: str, headers: Mapping[str, str]
    ) -> GatewayError:
        """The gateway's :class:`GatewayStatusError` for an SDK's status failure."""
        kept = _kept_headers(headers, self._redact)
        retry_after = _retry_after_seconds(kept)
        hint = "" if retry_after is None else f" The server asks to retry after {retry_after:g} s."
        return self._failure(
            GatewayStatusError,
            f"Model call to {where} failed with HTTP {status}: {self._excerpt(body)!r}.{hint}",
            status_code=status,
            body=self._excerpt(body),
            headers=kept,
            retry_after_seconds=retry_after,
        )

    def timeout_failure(self, where: str, phase: str) -> GatewayError:
        return self._failure(
            GatewayTimeoutError,
            f"Model call to {where} timed out while waiting to {phase} (the SDK client's "
            "timeout). Raise its timeout or check the server's load.",
            phase=phase,
        )

    def connection_failure(self, where: str, detail: str) -> GatewayError:
        return self._failure(
            GatewayConnectionError,
            f"The connection failed during model call to {where}: {detail}. Check that the "
            f"server is running at {self._endpoint}.",
        )

    def malformed(self, where: str, problem: str, text: str) -> GatewayError:
        return self._failure(
            GatewayMalformedResponseError,
            f"Model call to {where} returned something that is not a chat completion "
            f"({problem}): {self._excerpt(text)!r}.",
            body=self._excerpt(text),
        )

    async def call(self, call: ModelCall) -> ModelReply:
        """One chat completion through the SDK. Raises :class:`GatewayError`."""
        where = (
            f"{self._endpoint} (model {self._model!r}, run {call.run_id!r}, call {call.call_index})"
        )
        arguments = self._options.request(call)
        outcome: ModelReply | GatewayError
        deadline = self._options.checked.deadline
        try:
            if deadline is None:
                outcome = await self._exchange(arguments, where)
            else:
                async with asyncio.timeout(deadline):
                    outcome = await self._exchange(arguments, where)
        except TimeoutError:
            outcome = self._failure(
                GatewayTimeoutError,
                f"Model call to {where} did not finish within its deadline of {deadline:g} s; "
                "raise the deadline or stream.",
                phase="deadline",
            )
        # Raised outside the except blocks: an SDK exception (which holds the request and its
        # headers) must not travel along as __context__.
        if isinstance(outcome, GatewayError):
            raise outcome
        return outcome

    async def _exchange(self, arguments: dict[str, Any], where: str) -> ModelReply | GatewayError:
        failure: GatewayError | None = None
        try:
            started = await self._create(arguments)
            if (
                not self._options.stream
                or isinstance(started, Mapping)
                or hasattr(started, "choices")
            ):
                return self._read_whole(plain_payload(started), where)
            return await self._read_stream(started, where)
        except Exception as error:  # turned into a redacted GatewayError below, or re-raised
            failure = self._translate(error, where)
            if failure is None:
                raise
        return failure

    def _read_whole(self, payload: object, where: str) -> ModelReply | GatewayError:
        if not isinstance(payload, Mapping):
            return self.malformed(where, f"a {type(payload).__name__}", repr(payload))
        choices = payload.get("choices")
        if isinstance(choices, list) and not choices:
            return self._failure(
                GatewayMalformedResponseError,
                f"Model call to {where} returned an empty 'choices' list: the server produced "
                "no completion.",
                body=self._excerpt(_json_text(payload)),
            )
        draft = ReplyDraft()
        problem = draft.add_completion(payload)
        if problem is not None:
            return self.malformed(where, problem, _json_text(payload))
        return self._finished(draft, where, streamed=False)

    async def _read_stream(self, stream: Any, where: str) -> ModelReply | GatewayError:
        draft = ReplyDraft()
        try:
            async for chunk in stream:
                payload = plain_payload(chunk)
                problem = draft.add_chunk(payload)
                if problem is not None:
                    return self.malformed(where, problem, _json_text(payload))
        finally:
            await _close(stream)
        return self._finished(draft, where, streamed=True)

    def _finished(
        self, draft: ReplyDraft, where: str, *, streamed: bool
    ) -> ModelReply | GatewayError:
        if streamed and draft.finish_reason is None:
            # The SDKs end iteration quietly when a stream stops before ``data: [DONE]``; a
            # complete chat-completions stream always names its finish reason.
            return self._failure(
                GatewayIncompleteStreamError,
                f"The stream of model call {where} ended without a finish reason after "
                f"{len(''.join(draft.text))} characters of content: the reply may be cut off.",
            )
        return _kept_or_refused(
            self._adjusted(draft.reply()), self._options.checked.fail_on, where, self._failure
        )

    def _adjusted(self, reply: ModelReply) -> ModelReply:
        """A client's last word on a reply (LiteLLM drops the zero usage it makes up)."""
        return reply


def _json_text(payload: object) -> str:
    try:
        return json.dumps(payload, default=str)
    except (TypeError, ValueError):
        return repr(payload)


async def _close(stream: object) -> None:
    for name in ("aclose", "close"):
        closer = getattr(stream, name, None)
        if callable(closer):
            with contextlib.suppress(Exception):
                result = closer()
                if asyncio.iscoroutine(result):
                    await result
            return
