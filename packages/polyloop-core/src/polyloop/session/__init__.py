"""Assembly and the governed loop: ``AgentDefinition``, ``RunRequest``, ``run`` and ``resume``;
for runs that may wait for a person, ``run_or_park``/``resume_or_park`` and the decisions
(``approve``, ``edit``, ``reject``, ``answer``; design 0037); ``follow_up``, the next turn of a
conversation as a new run (design 0052); ``rebuilt_prompt``, the messages a recorded run sent
to its model, from its request and its log (design 0061); ``fork``, a new run from step K of a
recorded one with another agent, and ``replay_parser``, recorded replies read by another parser
(design 0067).

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
from polyloop.session._deciding import (
    AskHandler,
    UserDecision,
    answer,
    approve,
    edit,
    read_pending_ask,
    reject,
)
from polyloop.session._definition import (
    OBSERVATION_TOKEN,
    TOOLS_TOKEN,
    AgentDefinition,
    RunRequest,
    merge_snapshots,
)
from polyloop.session._follow_up import follow_up
from polyloop.session._fork import SnapshotDifference, fork, parameter_differences
from polyloop.session._gates import DEFAULT_REJECTED_TEMPLATE, REASON_TOKEN, ApprovalPolicy
from polyloop.session._loop import DEFAULT_EVENT_TIMEOUT_SECONDS, run, run_or_park, run_snapshot
from polyloop.session._messages import RebuiltPrompt, rebuilt_prompt
from polyloop.session._replay import DecisionDifference, ParserReplay, replay_log, replay_parser
from polyloop.session._resume import resume, resume_or_park

__all__ = [
    "DEFAULT_EVENT_TIMEOUT_SECONDS",
    "DEFAULT_REJECTED_TEMPLATE",
    "OBSERVATION_TOKEN",
    "REASON_TOKEN",
    "TOOLS_TOKEN",
    "AgentDefinition",
    "ApprovalPolicy",
    "AskHandler",
    "DecisionDifference",
    "ParserReplay",
    "RebuiltPrompt",
    "ResumeMove",
    "ResumePlan",
    "RunRequest",
    "SnapshotDifference",
    "TailState",
    "UserDecision",
    "action_result_id",
    "answer",
    "approve",
    "edit",
    "follow_up",
    "fork",
    "merge_snapshots",
    "model_result_id",
    "parameter_differences",
    "plan_resume",
    "read_pending_ask",
    "rebuilt_prompt",
    "reject",
    "replay_log",
    "replay_parser",
    "resume",
    "resume_or_park",
    "run",
    "run_or_park",
    "run_snapshot",
    "stop_after_step",
    "validate_log",
]
