"""Which records end a run: the stop reason a recorded step implies, and what a run's
parameter snapshot says about it (its completing tools, its parse-failure limit).

The live loop, ``resume`` and the ``polyloop`` command all derive stop reasons here, so the
three cannot disagree about why a run ended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from polyloop.types import ActionStatus, StepRecord, StopReason

__all__ = [
    "PARSE_FAILURE_LIMIT_KEY",
    "SnapshotFacts",
    "is_parse_failure",
    "snapshot_facts",
    "stop_after_step",
    "trailing_parse_failures",
]

#: The snapshot key of the budget's parse-failure limit (written by ``RunRequest``).
PARSE_FAILURE_LIMIT_KEY = "request.budget.max_consecutive_parse_failures"
_TOOL_NAMES_KEY = "request.tools"
_TOOL_PREFIX = "request.tools."
_COMPLETES_RUN_SUFFIX = ".completes_run"


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


def _count(snapshot: Mapping[str, str], key: str) -> int | None:
    text = snapshot.get(key)
    return int(text) if text is not None and text.isascii() and text.isdigit() else None


def snapshot_facts(snapshot: Mapping[str, str]) -> SnapshotFacts:
    """Read :class:`SnapshotFacts` from a parameter snapshot (``RunStarted.parameter_snapshot``)."""
    completing: set[str] = set()
    says_tools = _TOOL_NAMES_KEY in snapshot
    for key, value in snapshot.items():
        if key.startswith(_TOOL_PREFIX) and key.endswith(_COMPLETES_RUN_SUFFIX):
            says_tools = True
            if value == "true":
                completing.add(key[len(_TOOL_PREFIX) : -len(_COMPLETES_RUN_SUFFIX)])
    return SnapshotFacts(
        max_consecutive_parse_failures=_count(snapshot, PARSE_FAILURE_LIMIT_KEY),
        completing_tools=frozenset(completing) if says_tools else None,
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
