"""A host's words for where a run is (seed 002's status vocabulary), read from its log alone.

The ten stop reasons stay a closed set; a parked run has none. :data:`STATUS_OF_STOP_REASON`
maps every stop reason to the status of a finished run, and :func:`run_status` adds the three
states of a run that has not finished (design 0038).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.ports import RunLog
from polyloop.types import (
    StopReason,
)

__all__ = ["STATUS_OF_STOP_REASON", "RunStatus", "answer_to", "pending_ask", "run_status"]


class RunStatus(StrEnum):
    """Where a run is, in the words of a host's status column (seed 002)."""

    #: No record yet: the run_id is known to the host, the store holds nothing of it. Also a
    #: fork whose creation a crash cut short (design 0072): its copy of the source's records
    #: is not whole, so it has not started; calling ``fork`` again creates it.
    CREATED = "created"
    #: Started and not finished, and not waiting for a person (a driver may be on it, or it
    #: crashed and waits for ``resume``; the lease, not the log, says which).
    RUNNING = "running"
    #: Parked on an ask (an approval or a question) that no one has decided yet.
    WAITING_APPROVAL = "waiting_approval"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    #: Stopped by a budget before the goal was reached.
    TIMED_OUT = "timed_out"


#: The status of a finished run, by its stop reason; every one of the ten is mapped.
STATUS_OF_STOP_REASON: Mapping[StopReason, RunStatus] = MappingProxyType(
    {
        StopReason.TASK_COMPLETED: RunStatus.SUCCEEDED,
        StopReason.AGENT_FINISHED: RunStatus.SUCCEEDED,
        StopReason.STEP_BUDGET: RunStatus.TIMED_OUT,
        StopReason.ACTION_BUDGET: RunStatus.TIMED_OUT,
        StopReason.CONTEXT_OVERFLOW: RunStatus.FAILED,
        StopReason.PARSE_FAILED_REPEATEDLY: RunStatus.FAILED,
        StopReason.ENV_ERROR: RunStatus.FAILED,
        StopReason.LLM_ERROR: RunStatus.FAILED,
        StopReason.RESUME_STATE_UNKNOWN: RunStatus.FAILED,
        StopReason.CANCELLED: RunStatus.CANCELLED,
    }
)


def answer_to(log: RunLog, ask: UserAsked) -> UserAnswered | None:
    """The recorded decision on ``ask``, if any."""
    for answered in log.answers:
        if answered.step == ask.step:
            return answered
    return None


def pending_ask(log: RunLog) -> UserAsked | None:
    """The ask the run waits on (seed 002's ``pending_ask``): the last ``UserAsked`` of an
    unfinished log, when no decision on it and no step of it is recorded; else ``None``."""
    if log.finished is not None or not log.asks:
        return None
    last = log.asks[-1]
    if last.step != len(log.steps) or answer_to(log, last) is not None:
        return None
    return last


def run_status(log: RunLog) -> RunStatus:
    """The status of the run whose log is ``log`` (see :class:`RunStatus`)."""
    if log.finished is not None:
        return STATUS_OF_STOP_REASON[log.finished.result.stop_reason]
    started = log.started
    if started is None:
        return RunStatus.CREATED
    if started.forked_at_step is not None and len(log.steps) < started.forked_at_step:
        return RunStatus.CREATED
    if pending_ask(log) is not None:
        return RunStatus.WAITING_APPROVAL
    return RunStatus.RUNNING
