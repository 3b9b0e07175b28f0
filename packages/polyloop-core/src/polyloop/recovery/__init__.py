"""Reading a run log back: its rules, why a run stopped, and the recovery table.

Below the loop and above the values, so that everything that reads a log uses the same rules:
``resume`` (to decide what to do), the stores (while they read), the ``polyloop`` command (to
show what ``resume`` would do, without calling any seam) and any downstream tool.

- :func:`validate_log`: the structural rules; a log that breaks one is corrupt.
- :class:`WriteOrderCheck`: the order of writes across record kinds, for stores that keep it.
- :func:`stop_after_step`, :func:`budget_stop`, :func:`stop_reasons_allowed` and
  :func:`snapshot_facts`: the stop reason a recorded step implies, the budgets, the reasons a
  finished log may name, and what a run's parameter snapshot says about them.
- :func:`action_terms`: the rule of an action's replay policy and completion (a tool-less action
  is ``never`` to replay; a tool call takes its tool's terms), used by the loop, ``resume``,
  the validation and the test kit's record builders.
- :func:`plan_resume`: the four-state table applied to the tail of a valid log.
- :func:`model_result_id` / :func:`action_result_id`: the ids the loop allocates.
- :func:`run_status`, :func:`pending_ask` and :data:`STATUS_OF_STOP_REASON`: a host's status
  words (seed 002) and the ask a parked run waits on (designs 0037, 0038).
"""

from __future__ import annotations

from polyloop.recovery._result_ids import action_result_id, model_result_id
from polyloop.recovery._status import (
    STATUS_OF_STOP_REASON,
    RunStatus,
    answer_to,
    pending_ask,
    run_status,
)
from polyloop.recovery._stops import (
    PARSE_FAILURE_LIMIT_KEY,
    SnapshotFacts,
    budget_stop,
    is_parse_failure,
    snapshot_facts,
    stop_after_step,
    stop_reasons_allowed,
    trailing_parse_failures,
)
from polyloop.recovery._table import ResumeMove, ResumePlan, TailState, plan_resume
from polyloop.recovery._terms import TOOL_LESS_TERMS, ActionTerms, ToolTerms, action_terms
from polyloop.recovery._validation import validate_log
from polyloop.recovery._write_order import WriteOrderCheck

__all__ = [
    "PARSE_FAILURE_LIMIT_KEY",
    "STATUS_OF_STOP_REASON",
    "TOOL_LESS_TERMS",
    "ActionTerms",
    "ResumeMove",
    "ResumePlan",
    "RunStatus",
    "SnapshotFacts",
    "TailState",
    "ToolTerms",
    "WriteOrderCheck",
    "action_result_id",
    "action_terms",
    "answer_to",
    "budget_stop",
    "is_parse_failure",
    "model_result_id",
    "pending_ask",
    "plan_resume",
    "run_status",
    "snapshot_facts",
    "stop_after_step",
    "stop_reasons_allowed",
    "trailing_parse_failures",
    "validate_log",
]
