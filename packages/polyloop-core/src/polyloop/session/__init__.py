"""Assembly and the governed loop: ``AgentDefinition``, ``RunRequest``, ``run`` and ``resume``.

Also re-exported from :mod:`polyloop.recovery`, where they live, for tools that inspect logs
without running anything: ``validate_log`` (the corruption rules) and ``plan_resume`` (the
four-state recovery table).
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
    "merge_snapshots",
    "model_result_id",
    "plan_resume",
    "resume",
    "run",
    "run_snapshot",
    "stop_after_step",
    "validate_log",
]
