"""A :class:`~polyloop.ports.ModelClient` over an ``openai.AsyncOpenAI`` you built (design 0064).

``pip install 'polyloop-adapters[openai]'``. You keep configuring the SDK as you do (keys, base
URL, Azure's endpoint and API version, proxies, ``http_client``, timeouts); PolyLoop sends the
request the gateway client sends and reads the reply the way the gateway does
(:mod:`polyloop.adapters.gateway`: content, thinking, native tool calls in the canonical form
:class:`~polyloop.adapters.tool_calls.ToolCallReplyParser` reads, ``finish_reason``,
``usage``)::

    client = openai.AsyncOpenAI(base_url="http://127.0.0.1:8000/v1", api_key=key)
    model = OpenAIModelClient(client, "my-model", native_tools=True, stream=True, deadline=600)
    model = RetryingModelClient(model, RetryPolicy(max_attempts=6))   # retries: design 0065

Retries: by default each call goes through ``client.with_options(max_retries=0)``, so one call
is one HTTP request and retries are :mod:`polyloop.adapters.retry`'s, counted and logged.
``sdk_retries=True`` keeps the SDK's own ``max_retries``: its retries are then invisible to
PolyLoop (a counted request may be several HTTP requests).

Failures raise the gateway's errors (:class:`~polyloop.adapters.gateway.GatewayStatusError`
with ``retry_after_seconds``, ``GatewayTimeoutError``, ``GatewayConnectionError``…), redacted
of the client's API key (Azure's AD token too) and of its ``default_headers`` values, with no
SDK exception attached. The client is not closed by PolyLoop: it is yours.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Unpack

import openai

from polyloop.adapters._chat_sdk import (
    ChatOptionArguments,
    SdkChatClient,
    chat_options,
    public_endpoint,
)
from polyloop.adapters.gateway._errors import GatewayError
from polyloop.adapters.gateway._redaction import Redactor, split_userinfo
from polyloop.errors import ConfigurationError

__all__ = ["OpenAIModelClient"]

#: The SDK's transport timeouts by class name (openai 1.x and 2.x use httpx, 3.x httpx2).
_TIMEOUT_PHASES: Final[Mapping[str, str]] = {
    "ConnectTimeout": "connect",
    "ReadTimeout": "read",
    "WriteTimeout": "write",
    "PoolTimeout": "pool",
}


def _secrets_of(client: openai.AsyncOpenAI) -> Redactor:
    """The client's key, Azure AD token, ``default_headers`` values and URL userinfo."""
    custom = getattr(client, "_custom_headers", None) or {}
    secrets = {name: value for name, value in custom.items() if isinstance(value, str)}
    token = getattr(client, "_azure_ad_token", None)
    if isinstance(token, str) and token:
        secrets["azure-ad-token"] = token
    return Redactor.for_client(
        api_key=client.api_key or None, headers=secrets, url=split_userinfo(str(client.base_url))
    )


class OpenAIModelClient(SdkChatClient):
    """Chat completions through ``client.chat.completions.create``.

    ``model`` is the model name (Azure: the deployment). The options are the gateway's and mean
    the same (``native_tools``, ``tool_choice``, ``parallel_tool_calls``, sampling,
    ``extra_body``, ``binding_metadata``, ``stream``, ``stream_usage``, ``deadline``,
    ``fail_on_finish_reasons``); the binding goes as the ``X-PolyLoop-*`` headers. Timeouts,
    the connection pool and static headers are the SDK client's.

    :meth:`parameters` names the client class, ``base_url`` (without userinfo or query), the
    Azure ``api_version`` when there is one, ``model`` and the options (gateway's rules); never
    the key, header values, ``timeout`` or ``sdk_retries``.
    """

    owner = "OpenAIModelClient"

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        *,
        sdk_retries: bool = False,
        **options: Unpack[ChatOptionArguments],
    ) -> None:
        if not isinstance(client, openai.AsyncOpenAI):
            raise ConfigurationError(
                f"OpenAIModelClient needs an openai.AsyncOpenAI (or AsyncAzureOpenAI), got "
                f"{type(client).__name__}; the synchronous openai.OpenAI cannot be awaited."
            )
        if not isinstance(model, str) or not model:
            raise ConfigurationError("OpenAIModelClient model must be a non-empty string.")
        super().__init__(
            chat_options(self.owner, options),
            model=model,
            endpoint=public_endpoint(str(client.base_url)),
            redact=_secrets_of(client),
        )
        self._client: Final = client if sdk_retries else client.with_options(max_retries=0)
        self._kind: Final = type(client).__name__
        version = getattr(client, "_api_version", None)
        self._api_version: Final = version if isinstance(version, str) else None

    def __repr__(self) -> str:
        return (
            f"OpenAIModelClient({self._kind}, base_url={self._endpoint!r}, model={self._model!r})"
        )

    def parameters(self) -> Mapping[str, str]:
        """The client class, endpoint, model and options; no secret. Synchronous, no I/O."""
        params: dict[str, str] = {
            "kind": "openai_sdk_chat_completions",
            "client": self._kind,
            "base_url": self._endpoint,
            "model": self._model,
        }
        if self._api_version is not None:
            params["api_version"] = self._api_version
        params.update(self._options.parameters())
        return params

    async def _create(self, arguments: dict[str, Any]) -> object:
        return await self._client.chat.completions.create(model=self._model, **arguments)

    def _translate(self, error: Exception, where: str) -> GatewayError | None:
        if isinstance(error, openai.APIStatusError):
            response = error.response
            return self.status_failure(
                where, error.status_code, _body_text(response), response.headers
            )
        if isinstance(error, openai.APITimeoutError):
            cause = error.__cause__ or error.__context__
            return self.timeout_failure(where, _TIMEOUT_PHASES.get(type(cause).__name__, "read"))
        if isinstance(error, openai.APIConnectionError):
            cause = error.__cause__ or error.__context__
            detail = type(cause).__name__ if cause is not None else "no detail"
            if cause is not None and str(cause):
                detail += f": {cause}"
            return self.connection_failure(where, detail)
        if isinstance(error, openai.APIError):
            return self.malformed(where, type(error).__name__, str(error))
        return None


def _body_text(response: object) -> str:
    try:
        text = getattr(response, "text", "")
    except Exception:  # a streamed response not read, or undecodable
        return ""
    return text if isinstance(text, str) else ""
