"""The gateway client's errors: one hierarchy under :class:`~polyloop.errors.PolyLoopError`.

Every text an error holds has been through the client's redaction (its API key, the values of
its extra headers, the userinfo of its ``base_url``), and no third-party exception is chained.
"""

from __future__ import annotations

from collections.abc import Mapping

from polyloop.errors import PolyLoopError
from polyloop.types import ModelReply

__all__ = [
    "GatewayConnectionError",
    "GatewayEmptyChoicesError",
    "GatewayError",
    "GatewayFinishReasonError",
    "GatewayIncompleteStreamError",
    "GatewayMalformedResponseError",
    "GatewayStatusError",
    "GatewayTimeoutError",
]


class GatewayError(PolyLoopError):
    """A model call through the gateway failed. Nothing was retried.

    ``base_url`` (without userinfo) and ``model`` say which endpoint failed; the message says
    what to check.
    """

    def __init__(self, message: str, *, base_url: str, model: str) -> None:
        super().__init__(message)
        self.base_url = base_url
        self.model = model


class GatewayConnectionError(GatewayError):
    """No response could be read: the connection was refused, reset, or closed mid-response."""


class GatewayIncompleteStreamError(GatewayConnectionError):
    """A streamed response ended before its ``data: [DONE]`` marker: the reply may be cut off."""


class GatewayTimeoutError(GatewayError):
    """A time limit elapsed. ``phase`` is ``connect``, ``read``, ``write``, ``pool`` (the
    per-operation ``timeout``/``connect_timeout``) or ``deadline`` (the whole call)."""

    def __init__(self, message: str, *, base_url: str, model: str, phase: str) -> None:
        super().__init__(message, base_url=base_url, model=model)
        self.phase = phase


class GatewayStatusError(GatewayError):
    """The gateway answered with a status other than 2xx (4xx/5xx; redirects are not followed).

    ``body`` holds the first 500 characters of the response body. ``headers`` keeps the
    response headers a layer above needs to back off (``retry-after``, ``retry-after-ms``,
    ``x-ratelimit-*``, ``ratelimit-*``; names lower-cased), and ``retry_after_seconds`` is
    ``Retry-After`` (seconds or an HTTP date) or ``retry-after-ms`` in seconds, else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        base_url: str,
        model: str,
        status_code: int,
        body: str,
        headers: Mapping[str, str] | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        super().__init__(message, base_url=base_url, model=model)
        self.status_code = status_code
        self.body = body
        self.headers: Mapping[str, str] = dict(headers or {})
        self.retry_after_seconds = retry_after_seconds


class GatewayMalformedResponseError(GatewayError):
    """A success status, but the body is not a chat completion (``choices[0].message``, or a
    stream of ``chat.completion.chunk`` events).

    ``body`` holds the first 500 characters of the response body.
    """

    def __init__(self, message: str, *, base_url: str, model: str, body: str) -> None:
        super().__init__(message, base_url=base_url, model=model)
        self.body = body


class GatewayEmptyChoicesError(GatewayMalformedResponseError):
    """A success status with ``"choices": []``: the gateway returned no completion at all."""


class GatewayFinishReasonError(GatewayError):
    """The reply ended with a finish reason the client was told to refuse
    (``fail_on_finish_reasons``, e.g. ``length``: cut off at ``max_tokens``).

    ``finish_reason`` is that reason and ``reply`` the reply as it was read.
    """

    def __init__(
        self, message: str, *, base_url: str, model: str, finish_reason: str, reply: ModelReply
    ) -> None:
        super().__init__(message, base_url=base_url, model=model)
        self.finish_reason = finish_reason
        self.reply = reply
