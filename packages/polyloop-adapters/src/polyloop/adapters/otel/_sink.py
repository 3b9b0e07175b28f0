"""The event sink: PolyLoop's events as GenAI spans and metrics (designs 0049, 0062).

Span tree of one invocation (``run`` or ``resume``), all in the run's trace:

    invoke_agent <agent>      a root: stop reason, budgets left, recovery move
      chat <model>            per step, the model call: usage, finish reasons, llm_error status
      execute_tool <tool>     per step with an action: tool, call id, replay policy, outcome
      ...
      execute_tool | chat     on resume, the call in doubt that was refused (if any)

as the GenAI conventions lay out an agent's spans; the step index is the ``polyloop.step``
attribute of each. The model call and the action each span the time they ran (the
``STEP_COMPLETED`` event carries both, design 0062). Nothing here does I/O: spans end into the
tracer provider's processor, whose batch exporter sends them from its own thread.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from polyloop.adapters.otel import _names as n
from polyloop.adapters.otel._counts import Key, shared_counts
from polyloop.adapters.otel._ids import root_trace_id, run_context, steer_trace_ids
from polyloop.ports import Event, EventKind, ModelCall
from polyloop.types import (
    ActionStatus,
    IntentKind,
    Role,
    RunResult,
    StepRecord,
    StopReason,
    model_call_counts,
)

__all__ = ["OpenTelemetryEventSink", "TelemetryExportError"]

_SCOPE = "polyloop.adapters.otel"

#: Stop reasons that mark the invocation span as an error.
_ERROR_STOPS = frozenset(
    {StopReason.LLM_ERROR, StopReason.ENV_ERROR, StopReason.RESUME_STATE_UNKNOWN}
)

#: Provider usage keys (their own names, nested ones joined with ``.``) → GenAI attributes.
_USAGE_KEYS: Mapping[str, str] = {
    "prompt_tokens": n.GEN_AI.GEN_AI_USAGE_INPUT_TOKENS,
    "input_tokens": n.GEN_AI.GEN_AI_USAGE_INPUT_TOKENS,
    "completion_tokens": n.GEN_AI.GEN_AI_USAGE_OUTPUT_TOKENS,
    "output_tokens": n.GEN_AI.GEN_AI_USAGE_OUTPUT_TOKENS,
    "completion_tokens_details.reasoning_tokens": n.GEN_AI.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    "output_tokens_details.reasoning_tokens": n.GEN_AI.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    "prompt_tokens_details.cached_tokens": n.GEN_AI.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    "input_tokens_details.cached_tokens": n.GEN_AI.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
}
_TOKEN_TYPES: Mapping[str, str] = {
    n.GEN_AI.GEN_AI_USAGE_INPUT_TOKENS: n.TOKEN_INPUT,
    n.GEN_AI.GEN_AI_USAGE_OUTPUT_TOKENS: n.TOKEN_OUTPUT,
}
_PARSED: Key = ((n.PARSE_OK, True),)
_NOT_PARSED: Key = ((n.PARSE_OK, False),)
#: ``polyloop.model.requests`` by whether the request was a retry (design 0065).
_FIRST_REQUEST: Key = ((n.RETRY, False),)
_RETRY_REQUEST: Key = ((n.RETRY, True),)
_ERROR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")

#: ``model_client.kind`` of the snapshot → ``gen_ai.provider.name``. The conventions name the
#: provider by the protocol the client speaks ("openai" for an OpenAI client talking to any
#: compatible server); other kinds are named as they are.
_PROVIDERS: Mapping[str, str] = {
    "openai_chat_completions": n.GEN_AI.GenAiProviderNameValues.OPENAI.value,
}

_REPLAY_MOVES = {
    "call_model_again": (n.REPLAYED, None),
    "reuse_model_result": (n.REUSED, None),
    "execute_action_again": (n.REUSED, n.REPLAYED),
}


class TelemetryExportError(Exception):
    """Spans could not be sent to the collector; raised by ``emit`` so that the loop counts it in
    ``RunResult.event_delivery_failures``. The run itself is not affected."""


@dataclass(slots=True)
class _Invocation:
    span: Span
    context: Context
    first_step: int
    resumed: bool
    model: str | None
    max_steps: int | None
    max_actions: int | None
    policies: dict[str, str]
    resume_move: str | None
    provider: str | None
    #: When the step in progress started (``time.time_ns``), ``None`` between steps.
    step_started_ns: int | None = None


def _int_or_none(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _tool_error_type(tool: str | None, observation: str) -> str:
    """The exception type a tool raised, from the observation the registry wrote for it
    (``Tool 'name' failed: Type: message``, ``polyloop.tools``); ``tool_error`` otherwise (a
    handler that returned no text, another executor's synthetic observation)."""
    prefix = f"Tool {tool!r} failed: "
    if observation.startswith(prefix):
        head = observation[len(prefix) :].split(":", 1)[0].strip()
        if _ERROR_NAME.fullmatch(head):
            return head
    return "tool_error"


def _input_messages(call: ModelCall) -> str:
    """The call's messages as ``gen_ai.input.messages`` (the conventions' JSON form): a text
    part per block, a tool message as the response to the call it names."""
    messages: list[dict[str, object]] = []
    for message in call.messages:
        parts: list[dict[str, object]]
        if message.role is Role.TOOL:
            text = "".join(block.text for block in message.content)
            parts = [{"type": "tool_call_response", "id": message.tool_call_id, "response": text}]
        else:
            parts = [{"type": "text", "content": block.text} for block in message.content]
        messages.append({"role": message.role.value, "parts": parts})
    return json.dumps(messages, ensure_ascii=False)


def _error_type(failure: str | None) -> str:
    """The exception type of a recorded model-call failure (``"Type: message"``), never the
    message: it may quote what the client was given."""
    head = (failure or "").split(":", 1)[0].strip()
    return head if _ERROR_NAME.fullmatch(head) else "model_call_failed"


class OpenTelemetryEventSink:
    """An :class:`~polyloop.ports.EventSink` that turns a run's events into spans following the
    OpenTelemetry semantic conventions for generative AI, plus PolyLoop's own ``polyloop.*``
    attributes and metrics.

    ``tracer_provider``/``meter_provider``: where spans and measurements go (default: the
    global providers). :class:`~polyloop.adapters.otel.OtlpTelemetry` builds both for an OTLP
    endpoint and hands its export-failure count in as ``export_failures``.

    ``capture_content``: the messages sent to the model (``gen_ai.input.messages``), its reply,
    tool arguments and observations are recorded only when this is ``True`` (the conventions
    advise off by default: they may hold personal data). Secrets are never read: the sink sees
    only events, and takes from the parameter snapshot only the model name, the client's kind,
    the budgets and the tools' replay policies.

    ``provider_name``: ``gen_ai.provider.name`` of the spans; by default derived from the model
    client's kind (``openai`` for the OpenAI-compatible gateway client).

    Each invocation is a root span in the trace derived from the run id when the tracer is the
    SDK's; another tracer's invocations hang under the run's span id (never exported).

    ``emit`` never suspends and does no I/O. It raises :class:`TelemetryExportError` when the
    exporter reported failed exports since the previous event, so that they count in
    ``RunResult.event_delivery_failures``; the event itself is still recorded.
    """

    __slots__ = (
        "__weakref__",
        "_actions",
        "_agent_name",
        "_capture_content",
        "_export_failures",
        "_failures_seen",
        "_open",
        "_provider",
        "_requests",
        "_roots",
        "_runs",
        "_steps",
        "_tokens",
        "_tracer",
    )

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        capture_content: bool = False,
        agent_name: str = "polyloop",
        export_failures: Callable[[], int] | None = None,
        provider_name: str | None = None,
    ) -> None:
        if not isinstance(capture_content, bool):
            raise TypeError(
                f"capture_content must be True or False, got {capture_content!r}; content is "
                "recorded only when it is switched on explicitly."
            )
        if not isinstance(agent_name, str) or not agent_name:
            raise ValueError(f"agent_name must be a non-empty string, got {agent_name!r}.")
        if provider_name is not None and (not isinstance(provider_name, str) or not provider_name):
            raise ValueError(
                f"provider_name must be a non-empty string (e.g. 'openai') or None, got "
                f"{provider_name!r}."
            )
        self._tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        self._roots = steer_trace_ids(self._tracer)
        self._provider = provider_name
        counts = shared_counts(meter_provider)
        self._steps = counts.counter(n.STEPS_METRIC, "{step}", "Steps recorded, by parse outcome.")
        self._actions = counts.counter(
            n.ACTIONS_METRIC, "{action}", "Actions attempted, by outcome."
        )
        self._runs = counts.counter(
            n.RUNS_METRIC, "{invocation}", "Run invocations that ended, by stop reason."
        )
        self._tokens = n.create_token_usage(counts.meter)
        self._requests = counts.counter(
            n.MODEL_REQUESTS_METRIC,
            "{request}",
            "Requests of the model calls, by whether they were retries.",
        )
        self._capture_content = capture_content
        self._agent_name = agent_name
        self._export_failures = export_failures
        self._failures_seen = 0 if export_failures is None else export_failures()
        self._open: dict[str, _Invocation] = {}

    def parameters(self) -> Mapping[str, str]:
        """Only the kind: where telemetry goes or whether content is captured may change
        between a crash and its resume without changing the run."""
        return {"kind": "opentelemetry"}

    @property
    def open_invocations(self) -> int:
        """Invocations started and not yet finished (a run that raised leaves one open until
        the run starts again or :meth:`end_open_invocations` is called)."""
        return len(self._open)

    async def emit(self, event: Event) -> None:
        """Record ``event`` (see the class docstring). Never suspends."""
        kind = event.kind
        if kind is EventKind.STEP_COMPLETED:
            self._step_completed(event)
        elif kind is EventKind.STEP_STARTED:
            self._step_started(event)
        elif kind is EventKind.RUN_STARTED:
            self._run_started(event)
        elif kind is EventKind.RUN_FINISHED:
            self._run_finished(event)
        elif kind is EventKind.RUN_PARKED:
            self._run_parked(event)
        self._check_exports()

    def end_open_invocations(self) -> None:
        """End every invocation span still open (a run that raised instead of finishing), as
        errors; call it before shutting the tracer provider down."""
        for run_id in list(self._open):
            self._abandon(run_id)

    # -- events -------------------------------------------------------------------------------

    def _run_started(self, event: Event) -> None:
        run_id = event.run_id
        if run_id in self._open:
            self._abandon(run_id)
        snapshot = event.parameter_snapshot
        model = snapshot.get("model_client.model")
        kind = snapshot.get("model_client.kind")
        provider = self._provider or (None if not kind else _PROVIDERS.get(kind, kind))
        policies = {
            key[len("request.tools.") : -len(".replay_policy")]: value
            for key, value in snapshot.items()
            if key.startswith("request.tools.") and key.endswith(".replay_policy")
        }
        attributes: dict[str, str | int | bool] = {
            n.GEN_AI.GEN_AI_OPERATION_NAME: n.INVOKE_AGENT,
            n.GEN_AI.GEN_AI_AGENT_NAME: self._agent_name,
            n.GEN_AI.GEN_AI_CONVERSATION_ID: run_id,
            n.RUN_ID: run_id,
            n.RESUMED: event.resumed,
            n.FIRST_STEP: event.step_idx,
        }
        if model:
            attributes[n.GEN_AI.GEN_AI_REQUEST_MODEL] = model
        if provider:
            attributes[n.GEN_AI.GEN_AI_PROVIDER_NAME] = provider
        intent = event.intent_in_doubt
        if event.resume_move is not None:
            attributes[n.RESUME_MOVE] = event.resume_move
        if intent is not None:
            attributes[n.RESUME_INTENT_KIND] = intent.kind.value
            attributes[n.RESUME_RESULT_ID] = intent.result_id
            attributes[n.RESUME_REPLAY_POLICY] = intent.replay_policy.value
        name = f"{n.INVOKE_AGENT} {self._agent_name}"
        if self._roots:
            with root_trace_id(run_id) as parent:
                span = self._tracer.start_span(
                    name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes
                )
        else:
            parent = run_context(run_id)
            span = self._tracer.start_span(
                name, context=parent, kind=SpanKind.INTERNAL, attributes=attributes
            )
        invocation = _Invocation(
            span=span,
            context=trace.set_span_in_context(span, parent),
            first_step=event.step_idx,
            resumed=event.resumed,
            model=model,
            max_steps=_int_or_none(snapshot.get("request.budget.max_steps")),
            max_actions=_int_or_none(snapshot.get("request.budget.max_actions")),
            policies=policies,
            resume_move=event.resume_move,
            provider=provider,
        )
        self._open[run_id] = invocation
        if event.resume_move == "stop_state_unknown" and intent is not None:
            self._refused(invocation, run_id, intent.kind, intent.result_id, intent.call_index)

    def _refused(
        self, invocation: _Invocation, run_id: str, kind: IntentKind, result_id: str, k: int
    ) -> None:
        """The call in doubt that resume will not make again: a zero-length span, marked."""
        attributes: dict[str, str | int | bool] = {
            n.RUN_ID: run_id,
            n.STEP: k,
            n.RESULT_ID: result_id,
            n.REPLAY_POLICY: "never",
            n.REFUSED: True,
        }
        if kind is IntentKind.ACTION:
            name = n.EXECUTE_TOOL
            attributes[n.GEN_AI.GEN_AI_OPERATION_NAME] = n.EXECUTE_TOOL
            attributes[n.GEN_AI.GEN_AI_TOOL_CALL_ID] = result_id
            attributes[n.OUTCOME] = "refused"
        else:
            name = self._chat_name(invocation)
            attributes[n.GEN_AI.GEN_AI_OPERATION_NAME] = n.CHAT
            if invocation.model:
                attributes[n.GEN_AI.GEN_AI_REQUEST_MODEL] = invocation.model
            if invocation.provider:
                attributes[n.GEN_AI.GEN_AI_PROVIDER_NAME] = invocation.provider
        span = self._tracer.start_span(
            name, context=invocation.context, kind=SpanKind.INTERNAL, attributes=attributes
        )
        span.set_status(
            Status(
                StatusCode.ERROR,
                "refused on resume: announced, never settled, replay policy 'never'",
            )
        )
        span.set_attribute(n.ERROR_TYPE, StopReason.RESUME_STATE_UNKNOWN.value)
        span.end()

    def _step_started(self, event: Event) -> None:
        invocation = self._open.get(event.run_id)
        if invocation is not None:
            invocation.step_started_ns = time.time_ns()

    def _step_completed(self, event: Event) -> None:
        invocation = self._open.get(event.run_id)
        step = event.step
        if invocation is None or step is None:
            return
        started, invocation.step_started_ns = invocation.step_started_ns, None
        model_mark = action_mark = None
        if invocation.resumed and step.step_idx == invocation.first_step:
            model_mark, action_mark = _REPLAY_MOVES.get(invocation.resume_move or "", (None, None))
        # A call taken from the log (or an event without times) is an instant at the step's
        # start; an action not executed, an instant where the model call ended.
        called = event.model_call_ns
        if called is None:
            at = time.time_ns() if started is None else started
            called = (at, at)
        self._chat(invocation, event, step, called, model_mark)
        if event.model_result is not None:
            made, retried = model_call_counts(event.model_result)
            requests = self._requests
            requests[_FIRST_REQUEST] = requests.get(_FIRST_REQUEST, 0) + made - retried
            if retried:
                requests[_RETRY_REQUEST] = requests.get(_RETRY_REQUEST, 0) + retried
        if step.action is not None:
            acted = event.action_ns or (called[1], called[1])
            self._tool(invocation, event.run_id, step, acted, action_mark)
        steps, parsed = self._steps, _PARSED if step.parse_ok else _NOT_PARSED
        steps[parsed] = steps.get(parsed, 0) + 1

    def _chat_name(self, invocation: _Invocation) -> str:
        return f"{n.CHAT} {invocation.model}" if invocation.model else n.CHAT

    def _chat(
        self,
        invocation: _Invocation,
        event: Event,
        step: StepRecord,
        times: tuple[int, int],
        mark: str | None,
    ) -> None:
        run_id, result = event.run_id, event.model_result
        attributes: dict[str, str | int | bool | tuple[str, ...]] = {
            n.GEN_AI.GEN_AI_OPERATION_NAME: n.CHAT,
            n.RUN_ID: run_id,
            n.STEP: step.step_idx,
            n.PARSE_OK: step.parse_ok,
        }
        if step.calls_not_executed:
            attributes[n.CALLS_NOT_EXECUTED] = tuple(
                call.tool_name for call in step.calls_not_executed
            )
        if invocation.model:
            attributes[n.GEN_AI.GEN_AI_REQUEST_MODEL] = invocation.model
        if invocation.provider:
            attributes[n.GEN_AI.GEN_AI_PROVIDER_NAME] = invocation.provider
        if result is not None:
            attributes[n.RESULT_ID] = result.result_id
        if mark is not None:
            attributes[mark] = True
        if self._capture_content and event.model_call is not None:
            attributes[n.GEN_AI.GEN_AI_INPUT_MESSAGES] = _input_messages(event.model_call)
        reply = None if result is None else result.reply
        if reply is not None:
            # The model that answered, as the response named it; a reply without the name
            # (a log written before ModelReply.model, a server that omits it) falls back to
            # the model asked (designs 0062, 0074).
            answered = reply.model or invocation.model
            if answered:
                attributes[n.GEN_AI.GEN_AI_RESPONSE_MODEL] = answered
            if reply.call_id is not None:
                attributes[n.GEN_AI.GEN_AI_RESPONSE_ID] = reply.call_id
            if reply.finish_reason is not None:
                attributes[n.GEN_AI.GEN_AI_RESPONSE_FINISH_REASONS] = (reply.finish_reason,)
            for key, value in (reply.usage or {}).items():
                name = _USAGE_KEYS.get(key)
                if name is not None:
                    attributes[name] = value
            if self._capture_content:
                message = {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": reply.content}],
                    "finish_reason": reply.finish_reason or "stop",
                }
                attributes[n.GEN_AI.GEN_AI_OUTPUT_MESSAGES] = json.dumps(
                    [message], ensure_ascii=False
                )
        span = self._tracer.start_span(
            self._chat_name(invocation),
            context=invocation.context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=times[0],
        )
        if result is not None and result.reply is None:
            error = _error_type(result.failure)
            span.set_attribute(n.ERROR_TYPE, error)
            span.set_status(Status(StatusCode.ERROR, f"{StopReason.LLM_ERROR.value}: {error}"))
        span.end(times[1])
        if reply is not None and reply.usage:
            metric_attributes: dict[str, str] = {n.GEN_AI.GEN_AI_OPERATION_NAME: n.CHAT}
            if invocation.model:
                metric_attributes[n.GEN_AI.GEN_AI_REQUEST_MODEL] = invocation.model
            for name, token_type in _TOKEN_TYPES.items():
                count = attributes.get(name)
                if isinstance(count, int):
                    self._tokens.record(
                        count, {**metric_attributes, n.GEN_AI.GEN_AI_TOKEN_TYPE: token_type}
                    )

    def _tool(
        self,
        invocation: _Invocation,
        run_id: str,
        step: StepRecord,
        times: tuple[int, int],
        mark: str | None,
    ) -> None:
        tool = step.tool_name
        status = step.action_status
        outcome = "not_executed" if status is None else status.value
        attributes: dict[str, str | int | bool] = {
            n.GEN_AI.GEN_AI_OPERATION_NAME: n.EXECUTE_TOOL,
            n.GEN_AI.GEN_AI_TOOL_CALL_ID: f"action-{step.step_idx}",
            n.RUN_ID: run_id,
            n.STEP: step.step_idx,
            n.REPLAY_POLICY: invocation.policies.get(tool, "never") if tool else "never",
            n.OUTCOME: outcome,
            n.OBSERVATION_SYNTHETIC: step.observation_is_synthetic,
            n.ENV_REPORTED_COMPLETION: step.env_reported_completion,
        }
        if tool is not None:
            attributes[n.GEN_AI.GEN_AI_TOOL_NAME] = tool
        if mark is not None:
            attributes[mark] = True
        if self._capture_content:
            arguments = step.tool_arguments if step.tool_arguments is not None else step.action
            if arguments is not None:
                attributes[n.GEN_AI.GEN_AI_TOOL_CALL_ARGUMENTS] = arguments
            attributes[n.GEN_AI.GEN_AI_TOOL_CALL_RESULT] = step.observation
        span = self._tracer.start_span(
            f"{n.EXECUTE_TOOL} {tool}" if tool else n.EXECUTE_TOOL,
            context=invocation.context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=times[0],
        )
        if status is ActionStatus.ENV_ERROR:
            span.set_attribute(n.ERROR_TYPE, StopReason.ENV_ERROR.value)
            span.set_status(Status(StatusCode.ERROR, StopReason.ENV_ERROR.value))
        elif status is ActionStatus.EXECUTED and step.observation_is_synthetic:
            # Executed, but the executor wrote the observation: the tool raised (or gave no
            # text). The type only: the message may quote the arguments.
            error = _tool_error_type(tool, step.observation)
            span.set_attribute(n.ERROR_TYPE, error)
            span.set_status(Status(StatusCode.ERROR, f"the tool failed: {error}"))
        span.end(times[1])
        actions, outcome_key = self._actions, ((n.OUTCOME, outcome),)
        actions[outcome_key] = actions.get(outcome_key, 0) + 1

    def _run_finished(self, event: Event) -> None:
        invocation = self._open.pop(event.run_id, None)
        result = event.result
        if invocation is None or result is None:
            return
        span = invocation.span
        self._finish_attributes(span, invocation, result)
        if result.stop_reason in _ERROR_STOPS:
            span.set_attribute(n.ERROR_TYPE, result.stop_reason.value)
            span.set_status(Status(StatusCode.ERROR, result.stop_reason.value))
        span.end()
        runs, reason = self._runs, ((n.STOP_REASON, result.stop_reason.value),)
        runs[reason] = runs.get(reason, 0) + 1

    def _run_parked(self, event: Event) -> None:
        """The run waits for a person: this invocation ends, not as an error; the ``resume``
        that carries out the decision is the next invocation of the trace."""
        invocation = self._open.pop(event.run_id, None)
        if invocation is None:
            return
        invocation.span.set_attribute(n.PARKED, True)
        invocation.span.set_attribute(n.STEPS_RECORDED, event.step_idx)
        invocation.span.end()

    def _finish_attributes(self, span: Span, invocation: _Invocation, result: RunResult) -> None:
        steps = len(result.steps)
        span.set_attribute(n.STOP_REASON, result.stop_reason.value)
        span.set_attribute(n.STEPS_RECORDED, steps)
        span.set_attribute(n.DELIVERY_FAILURES, result.event_delivery_failures)
        if invocation.max_steps is not None:
            span.set_attribute(n.STEPS_LEFT, max(0, invocation.max_steps - steps))
        if invocation.max_actions is not None:
            executed = sum(1 for s in result.steps if s.action_status is ActionStatus.EXECUTED)
            span.set_attribute(n.ACTIONS_LEFT, max(0, invocation.max_actions - executed))

    def _abandon(self, run_id: str) -> None:
        invocation = self._open.pop(run_id)
        invocation.span.set_status(
            Status(StatusCode.ERROR, "the invocation raised before it recorded how the run ended")
        )
        invocation.span.end()

    def _check_exports(self) -> None:
        if self._export_failures is None:
            return
        failed = self._export_failures()
        if failed > self._failures_seen:
            new, self._failures_seen = failed - self._failures_seen, failed
            raise TelemetryExportError(
                f"{new} span export(s) to the OpenTelemetry collector failed since the previous "
                "event (the spans in them are lost); check that the collector is reachable."
            )
