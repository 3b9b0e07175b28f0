"""Which records end a run: the stop reason a recorded step implies, the budgets checked before
a step, what a run's parameter snapshot says about them, and so which stop reasons a finished
log may name.

The live loop, ``resume``, the log's validation and the ``polyloop`` command all derive stop
reasons here, so none of them can disagree about why a run ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from polyloop.types import ActionStatus, ReplayPolicy, StepRecord, StopReason

__all__ = [
    "PARSE_FAILURE_LIMIT_KEY",
    "SnapshotFacts",
    "budget_stop",
    "implied_by_last_step",
    "is_parse_failure",
    "snapshot_facts",
    "stop_after_step",
    "stop_reasons_allowed",
    "trailing_parse_failures",
]

#: The snapshot key of the budget's parse-failure limit (written by ``RunRequest``).
PARSE_FAILURE_LIMIT_KEY = "request.budget.max_consecutive_parse_failures"
_MAX_STEPS_KEY = "request.budget.max_steps"
_MAX_ACTIONS_KEY = "request.budget.max_actions"
_MODEL_REPLAY_POLICY_KEY = "request.model_replay_policy"
_TOOL_NAMES_KEY = "request.tools"
_TOOL_PREFIX = "request.tools."
_COMPLETES_RUN_SUFFIX = ".completes_run"
_REPLAY_POLICY_SUFFIX = ".replay_policy"
_REQUIRES_APPROVAL_SUFFIX = ".requires_approval"
_ASKS_USER_SUFFIX = ".asks_user"
_REJECTED_TEMPLATE_KEY = "approval.rejected_template"
_POLICIES = {policy.value: policy for policy in ReplayPolicy}


@dataclass(frozen=True, slots=True)
class SnapshotFacts:
    """What a run's parameter snapshot says about the rules its log follows.

    ``None`` means the snapshot does not say (a log written by hand, or by a driver that
    records other keys); readers then assume nothing about that rule.
    """

    #: ``Budget.max_consecutive_parse_failures`` of the run.
    max_consecutive_parse_failures: int | None
    #: The names of the run's tools marked ``completes_run``.
    completing_tools: frozenset[str] | None
    #: ``Budget.max_steps`` of the run.
    max_steps: int | None = None
    #: ``Budget.max_actions`` of the run.
    max_actions: int | None = None
    #: ``RunRequest.model_replay_policy``: the policy of every model-call intent.
    model_replay_policy: ReplayPolicy | None = None
    #: Each tool's ``replay_policy`` (tools the snapshot does not name are absent).
    tool_replay_policies: Mapping[str, ReplayPolicy] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: The tools marked ``requires_approval`` (design 0037).
    approval_tools: frozenset[str] = frozenset()
    #: The tools marked ``asks_user``.
    question_tools: frozenset[str] = frozenset()
    #: ``RunRequest.rejected_template`` of a gated run.
    rejected_template: str | None = None


def _count(snapshot: Mapping[str, str], key: str) -> int | None:
    text = snapshot.get(key)
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def snapshot_facts(snapshot: Mapping[str, str]) -> SnapshotFacts:
    """Read :class:`SnapshotFacts` from a parameter snapshot (``RunStarted.parameter_snapshot``)."""
    completing: set[str] = set()
    approval: set[str] = set()
    questions: set[str] = set()
    policies: dict[str, ReplayPolicy] = {}
    says_tools = _TOOL_NAMES_KEY in snapshot
    for key, value in snapshot.items():
        if not key.startswith(_TOOL_PREFIX):
            continue
        if key.endswith(_COMPLETES_RUN_SUFFIX):
            says_tools = True
            if value == "true":
                completing.add(key[len(_TOOL_PREFIX) : -len(_COMPLETES_RUN_SUFFIX)])
        elif key.endswith(_REPLAY_POLICY_SUFFIX) and value in _POLICIES:
            policies[key[len(_TOOL_PREFIX) : -len(_REPLAY_POLICY_SUFFIX)]] = _POLICIES[value]
        elif key.endswith(_REQUIRES_APPROVAL_SUFFIX) and value == "true":
            approval.add(key[len(_TOOL_PREFIX) : -len(_REQUIRES_APPROVAL_SUFFIX)])
        elif key.endswith(_ASKS_USER_SUFFIX) and value == "true":
            questions.add(key[len(_TOOL_PREFIX) : -len(_ASKS_USER_SUFFIX)])
    return SnapshotFacts(
        max_consecutive_parse_failures=_count(snapshot, PARSE_FAILURE_LIMIT_KEY),
        completing_tools=frozenset(completing) if says_tools else None,
        max_steps=_count(snapshot, _MAX_STEPS_KEY),
        max_actions=_count(snapshot, _MAX_ACTIONS_KEY),
        model_replay_policy=_POLICIES.get(snapshot.get(_MODEL_REPLAY_POLICY_KEY, "")),
        tool_replay_policies=MappingProxyType(policies),
        approval_tools=frozenset(approval),
        question_tools=frozenset(questions),
        rejected_template=snapshot.get(_REJECTED_TEMPLATE_KEY),
    )


def is_parse_failure(step: StepRecord) -> bool:
    """A step whose reply could not be read (not a failed model call, which has no parse_error)."""
    return not step.parse_ok and step.parse_error is not None


def trailing_parse_failures(steps: Sequence[StepRecord]) -> int:
    """How many parse failures in a row end ``steps``."""
    count = 0
    for step in reversed(steps):
        if not is_parse_failure(step):
            break
        count += 1
    return count


def stop_after_step(
    step: StepRecord,
    *,
    completes_run: bool,
    consecutive_parse_failures: int,
    max_consecutive_parse_failures: int,
) -> StopReason | None:
    """The stop reason a just-recorded step implies, or ``None`` when the run goes on.

    Used by the live loop after every step and by ``resume`` on the last recorded step, so both
    derive the same reason from the same record.
    """
    if not step.parse_ok and step.parse_error is None:
        return StopReason.LLM_ERROR
    if step.action_status is ActionStatus.ENV_ERROR:
        return StopReason.ENV_ERROR
    if step.action_status is ActionStatus.EXECUTED and (
        step.env_reported_completion or completes_run
    ):
        return StopReason.TASK_COMPLETED
    if step.parse_ok and step.action is None:
        return StopReason.AGENT_FINISHED
    if is_parse_failure(step) and consecutive_parse_failures >= max_consecutive_parse_failures:
        return StopReason.PARSE_FAILED_REPEATEDLY
    return None


def budget_stop(
    step_idx: int, actions_executed: int, max_steps: int, max_actions: int
) -> StopReason | None:
    """The budget that stops the run before step ``step_idx`` begins, or ``None``.

    The step budget is checked first, then the action budget (then the loop checks the prompt's
    size, which only it can measure).
    """
    if step_idx >= max_steps:
        return StopReason.STEP_BUDGET
    if actions_executed >= max_actions:
        return StopReason.ACTION_BUDGET
    return None


def implied_by_last_step(
    steps: Sequence[StepRecord], facts: SnapshotFacts
) -> set[StopReason | None]:
    """The stop reasons the last step may imply (``None``: the run went on), for every value
    of a fact the snapshot does not state."""
    last = steps[-1]
    completing = facts.completing_tools
    completes = (False, True) if completing is None else (last.tool_name in completing,)
    in_a_row = trailing_parse_failures(steps)
    limits = _reached_or_not(facts.max_consecutive_parse_failures, in_a_row)
    return {
        stop_after_step(
            last,
            completes_run=each,
            consecutive_parse_failures=in_a_row,
            max_consecutive_parse_failures=bound,
        )
        for each in completes
        for bound in limits
    }


def stop_reasons_allowed(
    steps: Sequence[StepRecord],
    *,
    step_begun: bool,
    in_doubt_policy: ReplayPolicy | None,
    facts: SnapshotFacts,
) -> frozenset[StopReason]:
    """The stop reasons a ``RunFinished`` may name after these records.

    ``step_begun``: an intent of the next step is recorded; ``in_doubt_policy``: the replay
    policy of that step's unsettled intent (its model call without a result, or its action
    without a step), if there is one. A run may be cancelled anywhere.
    """
    allowed = {StopReason.CANCELLED}
    if step_begun:
        if in_doubt_policy is ReplayPolicy.NEVER:
            allowed.add(StopReason.RESUME_STATE_UNKNOWN)
        return frozenset(allowed)
    if steps:
        implied = implied_by_last_step(steps, facts)
        allowed.update(reason for reason in implied if reason is not None)
        if None not in implied:
            return frozenset(allowed)
    count = len(steps)
    executed = sum(1 for step in steps if step.action_status is ActionStatus.EXECUTED)
    budgets = {
        budget_stop(count, executed, max_steps, max_actions)
        for max_steps in _reached_or_not(facts.max_steps, count)
        for max_actions in _reached_or_not(facts.max_actions, executed)
    }
    allowed.update(reason for reason in budgets if reason is not None)
    if None in budgets:
        # The prompt of the next step is not recorded: its size cannot be checked here.
        allowed.add(StopReason.CONTEXT_OVERFLOW)
    return frozenset(allowed)


def _reached_or_not(limit: int | None, used: int) -> tuple[int, ...]:
    """The limit, or, when the snapshot does not state it, one value reached and one not."""
    return (used, used + 1) if limit is None else (limit,)
