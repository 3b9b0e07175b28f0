"""A :class:`~polyloop.ports.ModelClient` over LiteLLM's ``acompletion`` (design 0064).

``pip install 'polyloop-adapters[litellm]'``. One client reaches any provider LiteLLM knows
(``anthropic/…``, ``gemini/…``, ``bedrock/…``, ``openai/…`` against any OpenAI-compatible
server), with its native tool calls translated by LiteLLM into the chat-completions form, which
PolyLoop reads exactly as the gateway does (:mod:`polyloop.adapters.gateway`)::

    model = LiteLLMModelClient("anthropic/claude-sonnet-4-5", api_key=key, native_tools=True)
    model = LiteLLMModelClient("openai/my-model", api_base="http://127.0.0.1:8000/v1")

``litellm`` is imported on the first call, so building a client (and ``parameters()``) does no
I/O; LiteLLM fetches its model-price map from the network at import unless
``LITELLM_LOCAL_MODEL_COST_MAP=True`` is set (do so offline).

Retries: every call passes ``num_retries=0`` and ``max_retries=0``, so one call is one request
to the provider and retries are :mod:`polyloop.adapters.retry`'s, counted and logged.
``timeout`` is LiteLLM's per-request timeout. LiteLLM reports a usage of zeros when the
provider sent none; such a usage is dropped (``usage`` is ``None``), so sums stay true.

Failures raise the gateway's errors, redacted of ``api_key`` and ``extra_headers`` values, with
no LiteLLM exception attached (they hold the request).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import replace
from types import ModuleType
from typing import Any, Final, Unpack

import openai

from polyloop.adapters._chat_sdk import (
    ChatOptionArguments,
    SdkChatClient,
    chat_options,
    public_endpoint,
)
from polyloop.adapters.gateway._errors import GatewayError
from polyloop.adapters.gateway._options import check_number
from polyloop.adapters.gateway._redaction import Redactor, split_userinfo
from polyloop.errors import ConfigurationError
from polyloop.types import ModelReply

__all__ = ["LiteLLMModelClient"]

#: What ``parameters()`` names as the endpoint when LiteLLM picks the provider's own.
PROVIDER_DEFAULT: Final = "provider default"


class LiteLLMModelClient(SdkChatClient):
    """Chat completions through ``litellm.acompletion``.

    ``model`` is LiteLLM's model string (``provider/model``). ``api_base`` (``None``: the
    provider's default), ``api_key`` (``None``: LiteLLM reads the provider's variable),
    ``api_version``, ``timeout`` and ``extra_headers`` (sent on every call; only their names
    are reported) go to every call; ``completion_options`` are further ``acompletion`` keyword
    arguments (``drop_params``, ``aws_region_name``…), reported as ``option.<name>``. The other
    options are the gateway's and mean the same.

    :meth:`parameters` names ``model``, ``api_base`` (without userinfo or query, or ``provider
    default``), ``api_version`` when given, the extra header names, the completion options and
    the gateway's options; never the key, header values or ``timeout``.
    """

    owner = "LiteLLMModelClient"

    def __init__(
        self,
        model: str,
        *,
        api_base: str | None = None,
        api_key: str | None = None,
        api_version: str | None = None,
        timeout: float | None = 600.0,
        extra_headers: Mapping[str, str] | None = None,
        completion_options: Mapping[str, object] | None = None,
        **options: Unpack[ChatOptionArguments],
    ) -> None:
        if not isinstance(model, str) or not model:
            raise ConfigurationError(
                "LiteLLMModelClient model must be a non-empty string such as "
                "'openai/my-model' or 'anthropic/claude-sonnet-4-5'."
            )
        if api_base is not None and (
            not isinstance(api_base, str) or not api_base.startswith(("http://", "https://"))
        ):
            raise ConfigurationError(
                f"LiteLLMModelClient api_base must start with http:// or https://, got "
                f"{split_userinfo(str(api_base)).url!r}."
            )
        if api_key is not None and not isinstance(api_key, str):
            raise ConfigurationError("LiteLLMModelClient api_key must be a string or None.")
        check_number(self.owner, "timeout", timeout)
        if timeout is not None and timeout <= 0:
            raise ConfigurationError(f"LiteLLMModelClient timeout must be > 0, got {timeout!r}.")
        headers = dict(extra_headers or {})
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items()):
            raise ConfigurationError("LiteLLMModelClient extra_headers must map str to str.")
        extra = dict(completion_options or {})
        owned = sorted(
            set(extra)
            & {
                "model", "messages", "api_base", "api_key", "api_version", "timeout",
                "extra_headers", "extra_body", "num_retries", "max_retries", "stream",
                "stream_options", "tools", "tool_choice", "parallel_tool_calls",
            }
        )  # fmt: skip
        if owned:
            raise ConfigurationError(
                f"LiteLLMModelClient completion_options may not set {owned}: pass them as the "
                "client's own arguments (retries belong to polyloop.adapters.retry)."
            )
        public = split_userinfo(api_base) if api_base is not None else None
        redact = Redactor.for_client(
            api_key=api_key,
            headers=headers,
            url=public if public is not None else split_userinfo(""),
        )
        super().__init__(
            chat_options(self.owner, options),
            model=model,
            endpoint=PROVIDER_DEFAULT if api_base is None else public_endpoint(api_base),
            redact=redact,
        )
        self._api_base: Final = api_base
        self._api_key: Final = api_key
        self._api_version: Final = api_version
        self._timeout: Final = None if timeout is None else float(timeout)
        self._headers: Final = headers
        self._completion_options: Final = extra
        self._litellm: ModuleType | None = None

    def __repr__(self) -> str:
        return f"LiteLLMModelClient(model={self._model!r}, api_base={self._endpoint!r})"

    def parameters(self) -> Mapping[str, str]:
        """Model, endpoint, header names, completion options and the gateway's options."""
        params: dict[str, str] = {
            "kind": "litellm_completion",
            "model": self._model,
            "api_base": self._endpoint,
        }
        if self._api_version is not None:
            params["api_version"] = self._api_version
        params["extra_header_names"] = ",".join(sorted(self._headers))
        for name, value in sorted(self._completion_options.items()):
            params[f"option.{name}"] = repr(value) if not isinstance(value, str) else value
        params.update(self._options.parameters())
        return params

    def _module(self) -> ModuleType:
        if self._litellm is None:
            self._litellm = importlib.import_module("litellm")
        return self._litellm

    async def _create(self, arguments: dict[str, Any]) -> object:
        litellm = self._module()
        headers = dict(self._headers)
        headers.update(arguments.pop("extra_headers"))
        body = arguments.pop("extra_body", None)
        request: dict[str, Any] = {
            **self._completion_options,
            **arguments,
            "model": self._model,
            "extra_headers": headers,
            "num_retries": 0,
            "max_retries": 0,
        }
        if body:
            request["extra_body"] = body
        for name, value in (
            ("api_base", self._api_base),
            ("api_key", self._api_key),
            ("api_version", self._api_version),
            ("timeout", self._timeout),
        ):
            if value is not None:
                request[name] = value
        return await litellm.acompletion(**request)

    def _translate(self, error: Exception, where: str) -> GatewayError | None:
        litellm = self._module()
        status = getattr(error, "status_code", None)
        if isinstance(error, litellm.Timeout):
            return self.timeout_failure(where, "read")
        # LiteLLM reports a refused connection as an InternalServerError (500) caused by the
        # SDK's connection error: no server answered, so it is a connection failure.
        broken = _connection_cause(error)
        if broken is not None or isinstance(error, openai.APIConnectionError):
            return self.connection_failure(where, broken or f"{type(error).__name__}: {error}")
        if isinstance(status, int) and not isinstance(status, bool) and status >= 400:
            return self.status_failure(where, status, *_body_and_headers(error))
        if isinstance(error, openai.OpenAIError):
            return self.malformed(where, type(error).__name__, str(error))
        return None

    def _adjusted(self, reply: ModelReply) -> ModelReply:
        if reply.usage is not None and not any(reply.usage.values()):
            return replace(reply, usage=None)
        return reply


def _connection_cause(error: BaseException) -> str | None:
    """The transport failure under a LiteLLM error, as text, if that is what it is."""
    seen: set[int] = set()
    cause: BaseException | None = error
    found: str | None = None
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, openai.APIConnectionError) and cause is not error:
            found = "the SDK could not reach the server"
        elif found is not None and isinstance(cause, OSError):
            return f"{type(cause).__name__}: {cause}"
        cause = cause.__cause__ or cause.__context__
    return found


def _body_and_headers(error: Exception) -> tuple[str, Mapping[str, str]]:
    headers: dict[str, str] = {}
    for source in (
        getattr(error, "litellm_response_headers", None),
        getattr(error, "headers", None),
    ):
        if source is not None and hasattr(source, "items"):
            headers.update({str(k): str(v) for k, v in source.items()})
    response = getattr(error, "response", None)
    body = ""
    if response is not None:
        try:
            body = str(response.text)
        except Exception:  # a response LiteLLM built without a body
            body = ""
        if not headers and hasattr(response, "headers"):
            headers.update({str(k): str(v) for k, v in response.headers.items()})
    if not body:
        body = str(getattr(error, "message", "") or error)
    return body, headers
