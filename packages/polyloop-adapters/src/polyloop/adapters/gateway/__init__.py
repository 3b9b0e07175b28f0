"""A :class:`~polyloop.ports.ModelClient` for OpenAI-compatible chat-completions gateways.

One :class:`GatewayModelClient` owns one HTTP connection pool. It makes exactly one HTTP request
per :meth:`~GatewayModelClient.call`: no retries, no back-off, no rate limiting (the gateway
below owns those). Every failure raises a :class:`GatewayError`; a ``200`` whose message content
is empty is a valid reply (the model really said nothing), never a failure.

Wire mapping (design 0013, grown by design 0024)
    Each :class:`~polyloop.types.Message` becomes ``{"role": <role>, "content": <text>}`` where
    the text is its blocks concatenated without separator (character counts are preserved).
    Native tool history (design 0046): an assistant message with a ``tool_call_id`` goes with
    its one canonical call as ``tool_calls`` (``content`` the text before it, or ``null``), and
    a ``TOOL`` message as ``{"role": "tool", "tool_call_id": ..., "content": ...}`` (as a
    ``user`` message when its call could not be sent natively).
    The reply, read whole or streamed, becomes one :class:`~polyloop.types.ModelReply`:

    - ``content``: ``choices[0].message.content``; a list of parts has its text parts joined
      (any other part is written ``[<type> part not shown]``); ``null`` reads as ``""``; a
      ``refusal`` is the content when there is no text. Native ``tool_calls`` follow the text
      in the canonical form of :mod:`polyloop.adapters.tool_calls`, which
      :class:`~polyloop.adapters.tool_calls.ToolCallReplyParser` reads back into actions; the
      legacy ``function_call`` only when the reply has no ``tool_calls`` entry (a server
      sending both sends one call twice).
    - ``thinking``: ``reasoning_content``, else ``reasoning``. ``call_id``: the response ``id``
      (``None`` when missing or empty).
    - ``finish_reason`` and ``usage`` (integer counts, nested ones joined with ``.``): as the
      server reported them. A reply cut off (``length``) is accepted unless the client was
      built with ``fail_on_finish_reasons``.

Streaming (``stream=True``)
    Server-sent events of ``chat.completion.chunk`` objects, accumulated into the same reply as
    the whole response would give. ``timeout`` then bounds the wait for each next chunk and
    ``deadline`` the whole call. A stream that ends without ``data: [DONE]`` raises
    :class:`GatewayIncompleteStreamError`; cancelling the call closes the response.

Forwarding of ``ModelCall.binding`` (the run's ``model_binding``)
    Always as one header, ``X-PolyLoop-Binding``, whose value is the binding as compact JSON
    with sorted keys and ASCII escapes (so any key or value survives, case included). Next to
    it, ``X-PolyLoop-Run-Id``, ``X-PolyLoop-Call-Index`` and ``X-PolyLoop-Result-Id`` identify
    the call (the result id is stable across a resume, so a gateway may deduplicate on it;
    the run id is sent as ASCII-escaped JSON string content when it is not plain ASCII).
    With ``binding_metadata=True`` the binding is also sent in the request body as the
    ``metadata`` object (OpenAI's field; some servers reject unknown body fields, hence opt-in).

Secrets
    The API key is sent only as ``Authorization: Bearer …``. The key, the values of the extra
    headers and the userinfo of ``base_url`` never appear in :meth:`~GatewayModelClient.parameters`,
    a ``repr``, a log line, or an error: every text the client produces (response excerpts and
    transport errors included) is redacted, and errors are raised outside the ``except`` block
    that caught the transport exception, so no third-party exception (which may hold the
    request) is attached.

Environment
    :meth:`GatewayModelClient.from_environment`, the examples and ``polyloop demo`` read
    ``POLYLOOP_GATEWAY_URL``, ``POLYLOOP_MODEL`` and ``POLYLOOP_API_KEY``.
"""

from polyloop.adapters.gateway._client import (
    API_KEY_VARIABLE,
    BINDING_HEADER,
    BODY_EXCERPT_CHARS,
    CALL_INDEX_HEADER,
    GATEWAY_URL_VARIABLE,
    MODEL_VARIABLE,
    RESULT_ID_HEADER,
    RUN_ID_HEADER,
    GatewayModelClient,
)
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

__all__ = [
    "API_KEY_VARIABLE",
    "BINDING_HEADER",
    "BODY_EXCERPT_CHARS",
    "CALL_INDEX_HEADER",
    "GATEWAY_URL_VARIABLE",
    "MODEL_VARIABLE",
    "RESULT_ID_HEADER",
    "RUN_ID_HEADER",
    "GatewayConnectionError",
    "GatewayEmptyChoicesError",
    "GatewayError",
    "GatewayFinishReasonError",
    "GatewayIncompleteStreamError",
    "GatewayMalformedResponseError",
    "GatewayModelClient",
    "GatewayStatusError",
    "GatewayTimeoutError",
]
