"""Span, attribute and metric names: the GenAI conventions' from their package, PolyLoop's own
under the ``polyloop.`` prefix (design 0049). Written once, here."""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv._incubating.metrics import gen_ai_metrics
from opentelemetry.semconv.attributes import error_attributes

__all__ = [
    "CHAT",
    "ERROR_TYPE",
    "EXECUTE_TOOL",
    "GEN_AI",
    "INVOKE_AGENT",
    "TOKEN_USAGE",
    "create_token_usage",
]

GEN_AI = gen_ai
ERROR_TYPE: Final = error_attributes.ERROR_TYPE
INVOKE_AGENT: Final = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
CHAT: Final = gen_ai.GenAiOperationNameValues.CHAT.value
EXECUTE_TOOL: Final = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
TOKEN_INPUT: Final = gen_ai.GenAiTokenTypeValues.INPUT.value
TOKEN_OUTPUT: Final = gen_ai.GenAiTokenTypeValues.COMPLETION.value
TOKEN_USAGE: Final = gen_ai_metrics.GEN_AI_CLIENT_TOKEN_USAGE
create_token_usage = gen_ai_metrics.create_gen_ai_client_token_usage

# -- PolyLoop's own attributes -------------------------------------------------------------
RUN_ID: Final = "polyloop.run_id"
STEP: Final = "polyloop.step"
RESUMED: Final = "polyloop.resumed"
FIRST_STEP: Final = "polyloop.first_step"
STOP_REASON: Final = "polyloop.stop_reason"
STEPS_RECORDED: Final = "polyloop.steps"
STEPS_LEFT: Final = "polyloop.budget.steps_left"
ACTIONS_LEFT: Final = "polyloop.budget.actions_left"
DELIVERY_FAILURES: Final = "polyloop.event_delivery_failures"
PARSE_OK: Final = "polyloop.parse_ok"
#: On ``polyloop.model.requests``: the request was a retry of a failed one (design 0065).
RETRY: Final = "polyloop.retry"
#: On a model call whose reply carried more tool calls than the step executes (design 0045):
#: the names of the calls not executed, in the model's order.
CALLS_NOT_EXECUTED: Final = "polyloop.calls_not_executed"
#: The recovery table's move on resume (``ResumeMove`` value), on the invocation span.
RESUME_MOVE: Final = "polyloop.resume.move"
RESUME_INTENT_KIND: Final = "polyloop.resume.intent_kind"
RESUME_RESULT_ID: Final = "polyloop.resume.result_id"
RESUME_REPLAY_POLICY: Final = "polyloop.resume.replay_policy"
#: ``True`` on a model call or action made again by resume (its first attempt was in doubt).
REPLAYED: Final = "polyloop.replayed"
#: ``True`` on a model call or action resume refused to make again (replay policy ``never``).
REFUSED: Final = "polyloop.refused"
#: ``True`` on a model call whose recorded result resume reused instead of calling again.
REUSED: Final = "polyloop.reused"
REPLAY_POLICY: Final = "polyloop.replay_policy"
#: ``ActionStatus`` value, or ``refused``.
OUTCOME: Final = "polyloop.action.outcome"
RESULT_ID: Final = "polyloop.result_id"
OBSERVATION_SYNTHETIC: Final = "polyloop.action.observation_is_synthetic"
ENV_REPORTED_COMPLETION: Final = "polyloop.action.env_reported_completion"
#: ``True`` on an invocation that ended waiting for a person (design 0037).
PARKED: Final = "polyloop.parked"

# -- metrics ------------------------------------------------------------------------------
STEPS_METRIC: Final = "polyloop.steps"
ACTIONS_METRIC: Final = "polyloop.actions"
RUNS_METRIC: Final = "polyloop.runs"
MODEL_REQUESTS_METRIC: Final = "polyloop.model.requests"
EXPORT_FAILURES_METRIC: Final = "polyloop.telemetry.export_failures"
#: Spans dropped because the export queue was full (design 0062).
SPANS_DROPPED_METRIC: Final = "polyloop.telemetry.spans_dropped"
BATCH_EPISODES_METRIC: Final = "polyloop.batch.episodes"
BATCH_STEPS_METRIC: Final = "polyloop.batch.steps"
BATCH_STEP_RATE_METRIC: Final = "polyloop.batch.steps_per_second"
EPISODE_OUTCOME: Final = "polyloop.batch.outcome"
