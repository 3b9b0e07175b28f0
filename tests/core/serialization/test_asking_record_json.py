"""The JSON of the two records of a run that asks a person (design 0037) is pinned by syrupy.

Hosts and ``polyloop pending`` read these payloads field by field; any change to their shape
must show up as a snapshot diff. Values include non-ASCII text, so the encoding is pinned too.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from syrupy.assertion import SnapshotAssertion

from polyloop.asking import AskKind, UserAnswered, UserAsked, Verdict
from polyloop.serialization import dumps_log_record, loads_log_record

RUN_ID = "run-ünïcödé-東京-1"
ARGUMENTS = '{"amount":80,"währung":"EUR"}'


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


APPROVAL = UserAsked(
    run_id=RUN_ID,
    step=3,
    kind=AskKind.APPROVAL,
    action='CALL refund {"amount": 80, "währung": "EUR"}',
    tool_name="refund",
    arguments_json=ARGUMENTS,
    arguments_sha256=_sha(ARGUMENTS),
    schema_sha256=_sha("{}"),
    description_sha256=_sha("Erstattet Geld."),
    policy_name="refunds-above-50",
    question=None,
    asked_at="2026-12-02T13:45:00+00:00",
)
QUESTION = UserAsked(
    run_id=RUN_ID,
    step=4,
    kind=AskKind.QUESTION,
    action='CALL ask_user {"question": "Welches Konto?"}',
    tool_name="ask_user",
    arguments_json='{"question":"Welches Konto?"}',
    arguments_sha256=_sha('{"question":"Welches Konto?"}'),
    schema_sha256=_sha("{}"),
    description_sha256=_sha("Fragt."),
    policy_name=None,
    question="Welches Konto?",
    asked_at="2026-12-02T13:46:00+00:00",
)
CODE = UserAsked(
    run_id=RUN_ID,
    step=5,
    kind=AskKind.APPROVAL,
    action="rm -rf /tmp/x",
    tool_name=None,
    arguments_json=None,
    arguments_sha256=_sha("rm -rf /tmp/x"),
    schema_sha256=None,
    description_sha256=None,
    policy_name="code-waits",
    question=None,
    asked_at="2026-12-02T13:47:00+00:00",
)


def _answered(verdict: Verdict, step: int, **fields: str) -> UserAnswered:
    defaults: dict[str, str | None] = {"arguments_json": None, "reason": None, "answer": None}
    defaults.update(fields)
    return UserAnswered(
        run_id=RUN_ID,
        step=step,
        verdict=verdict,
        arguments_sha256=_sha(ARGUMENTS),
        decided_by="Zoë",
        decided_at="2026-12-02T14:00:00+00:00",
        **defaults,  # type: ignore[arg-type]
    )


RECORDS = {
    "asked_approval": APPROVAL,
    "asked_question": QUESTION,
    "asked_tool_less": CODE,
    "answered_approve": _answered(Verdict.APPROVE, 3),
    "answered_edit": _answered(Verdict.EDIT, 3, arguments_json='{"amount":40,"währung":"EUR"}'),
    "answered_reject": _answered(Verdict.REJECT, 3, reason="zu viel — höchstens 50"),
    "answered_answer": _answered(Verdict.ANSWER, 4, answer="das Sparkonto"),
}


@pytest.mark.parametrize("name", sorted(RECORDS))
def test_asking_record_line_is_pinned(name: str, snapshot: SnapshotAssertion) -> None:
    """Each record's tagged log line (what every store writes) is the pinned one, and reads
    back to the same record."""
    record = RECORDS[name]
    line = dumps_log_record(record)
    assert snapshot == json.loads(line)
    assert snapshot == line
    assert record == loads_log_record(line)
