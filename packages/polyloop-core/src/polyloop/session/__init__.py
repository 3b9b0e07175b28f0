"""Assembly and the governed loop: ``AgentDefinition``, ``RunRequest``, ``run``, ``resume`` and
``follow_up`` (the next turn of a conversation, as a new run).

It also re-exports, for imports written before they moved, eight names of
:mod:`polyloop.recovery`, where they live and where new code imports them from: ``validate_log``
(the corruption rules), ``plan_resume`` (the recovery table), its values and the result ids.
"""

from __future__ import annotations

from polyloop.recovery import (
    ResumeMove,
    ResumePlan,
    TailState,
    action_result_id,
    model_result_id,
    plan_resume,
    stop_after_step,
    validate_log,
)
from polyloop.session._definition import (
    OBSERVATION_TOKEN,
    TOOLS_TOKEN,
    AgentDefinition,
    RunRequest,
    merge_snapshots,
)
from polyloop.session._follow_up import follow_up
from polyloop.session._loop import DEFAULT_EVENT_TIMEOUT_SECONDS, run, run_snapshot
from polyloop.session._resume import resume

__all__ = [
    "DEFAULT_EVENT_TIMEOUT_SECONDS",
    "OBSERVATION_TOKEN",
    "TOOLS_TOKEN",
    "AgentDefinition",
    "ResumeMove",
    "ResumePlan",
    "RunRequest",
    "TailState",
    "action_result_id",
    "follow_up",
    "merge_snapshots",
    "model_result_id",
    "plan_resume",
    "resume",
    "run",
    "run_snapshot",
    "stop_after_step",
    "validate_log",
]
