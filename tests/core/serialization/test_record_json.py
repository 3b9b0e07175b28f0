"""The JSON of a ``StepRecord`` and of each of the five log records is pinned by syrupy snapshots.

Downstream analyses read these payloads field by field, so any change to their shape (a field
renamed, reordered in meaning, a value spelled differently) must show up here as a snapshot diff.
Values are fixed and include non-ASCII text, so the encoding is pinned too.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from syrupy.assertion import SnapshotAssertion

from polyloop.serialization import dumps_log_record, loads_log_record, to_dict
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)

RUN_ID = "run-ünïcödé-東京-1"

STEP = StepRecord(
    step_idx=3,
    raw_output='CALL search {"query": "Grüße aus Köln"}',
    content_chars=38,
    thinking_chars=21,
    action='CALL search {"query": "Grüße aus Köln"}',
    parse_ok=True,
    parse_error=None,
    observation="Résultat : 2 documents trouvés — «ok»",
    observation_is_synthetic=False,
    observation_truncated_chars=120,
    prompt_chars=4096,
    call_id="chatcmpl-42",
    step_wall_ms=1834,
    tool_name="search",
    tool_arguments='{"query":"Grüße aus Köln"}',
    action_status=ActionStatus.EXECUTED,
    env_reported_completion=False,
)

FAILED_STEP = StepRecord(
    step_idx=4,
    raw_output="",
    content_chars=0,
    thinking_chars=0,
    action=None,
    parse_ok=False,
    parse_error=None,
    observation="Modellaufruf fehlgeschlagen — kein Ergebnis (Schritt 4).",
    observation_is_synthetic=True,
    observation_truncated_chars=0,
    prompt_chars=5120,
    call_id=None,
    step_wall_ms=30002,
)

OUTCOME = ActionOutcome(
    status=ActionStatus.EXECUTED,
    observation="Résultat : 2 documents trouvés — «ok»",
    observation_is_synthetic=False,
    env_reported_completion=False,
    observation_truncated_chars=120,
)

LOG_RECORDS: dict[str, Any] = {
    "run_started": RunStarted(
        run_id=RUN_ID,
        parameter_snapshot={
            "model_client.model": "qwen-2.5-coder",
            "request.budget.max_steps": "30",
            "request.model_binding.題目": "第七題",
            "synthetic_observations.env_failed": "L'environnement a échoué.",
        },
    ),
    "run_started_at": RunStarted(
        run_id=RUN_ID,
        parameter_snapshot={"request.budget.max_steps": "30"},
        started_at="2026-12-07T04:05:06+00:00",
    ),
    "intent": Intent(
        run_id=RUN_ID,
        kind=IntentKind.ACTION,
        call_index=3,
        result_id="action-3",
        replay_policy=ReplayPolicy.SAFE,
    ),
    "model_call_result": ModelCallResult(
        run_id=RUN_ID,
        result_id="model-3",
        reply=ModelReply(
            call_id="chatcmpl-42",
            content='CALL search {"query": "Grüße aus Köln"}',
            thinking="Ich suche zuerst … 🙂",
        ),
        failure=None,
    ),
    "model_call_result_failure": ModelCallResult(
        run_id=RUN_ID,
        result_id="model-4",
        reply=None,
        failure="TimeoutError: no reply within 30 s — réessayer plus tard",
    ),
    "step_completed": StepCompleted(
        run_id=RUN_ID, result_id="action-3", action_outcome=OUTCOME, step=STEP
    ),
    "step_completed_without_action": StepCompleted(
        run_id=RUN_ID, result_id=None, action_outcome=None, step=FAILED_STEP
    ),
    "run_finished": RunFinished(
        run_id=RUN_ID,
        result=RunResult(
            run_id=RUN_ID,
            stop_reason=StopReason.LLM_ERROR,
            final_answer=None,
            steps=(STEP, FAILED_STEP),
            event_delivery_failures=2,
        ),
    ),
}


def _pretty(payload: object) -> str:
    return json.dumps(payload, indent=2, sort_keys=True, ensure_ascii=False)


def test_step_record_json(snapshot: SnapshotAssertion) -> None:
    """The JSON of a `StepRecord` (all 18 fields, non-ASCII text) matches its snapshot."""
    assert _pretty(to_dict(STEP)) == snapshot


def test_step_record_of_a_failed_model_call_json(snapshot: SnapshotAssertion) -> None:
    """The JSON of an `llm_error` step (nulls, defaults, synthetic observation) matches its snapshot."""
    assert _pretty(to_dict(FAILED_STEP)) == snapshot


@pytest.mark.parametrize("name", list(LOG_RECORDS))
def test_log_record_json(name: str, snapshot: SnapshotAssertion) -> None:
    """The tagged JSON of each log record kind matches its snapshot."""
    line = dumps_log_record(LOG_RECORDS[name])
    assert _pretty(json.loads(line)) == snapshot


@pytest.mark.parametrize("name", list(LOG_RECORDS))
def test_log_line_json(name: str, snapshot: SnapshotAssertion) -> None:
    """The exact one-line text a store appends for each log record matches its snapshot."""
    assert dumps_log_record(LOG_RECORDS[name]) == snapshot


@pytest.mark.parametrize("name", list(LOG_RECORDS))
def test_snapshotted_records_decode_back(name: str) -> None:
    """Each pinned log line decodes back to the record it was made from."""
    record = LOG_RECORDS[name]
    assert loads_log_record(dumps_log_record(record)) == record


def test_every_log_record_kind_is_pinned() -> None:
    """The pinned records cover all five log record kinds."""
    kinds = {json.loads(dumps_log_record(record))["type"] for record in LOG_RECORDS.values()}
    assert kinds == {"run_started", "intent", "model_call_result", "step_completed", "run_finished"}
