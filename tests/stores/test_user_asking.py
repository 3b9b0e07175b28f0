"""Every store holds the records of a run that asks a person (issue 24 item 6, design 0039):
a gated run parks, is decided and resumed through other store objects on the same storage,
and a second decision for one ask is refused by the storage itself."""

from __future__ import annotations

import pytest

from polyloop.asking import AskKind, RunParked, UserAnswered, Verdict
from polyloop.errors import DuplicateRecordError
from polyloop.ports import UserAsking, supports_user_asking
from polyloop.recovery import RunStatus, pending_ask, run_status, validate_log
from polyloop.session import answer, approve, read_pending_ask, resume_or_park, run_or_park
from polyloop.types import RunResult, StopReason
from tests.asking_kit import definition, gated_request
from tests.loop_kit import Effects
from tests.stores._helpers import Opened

SCRIPT = [
    'CALL refund {"amount": 80}',
    'CALL ask_user {"question": "Which account?"}',
    "CALL submit {}",
]


async def test_a_gated_run_parks_is_decided_and_resumed_across_store_objects(
    opened: Opened,
) -> None:
    """Park on one object, decide on a second, resume on a third: nothing is lost or repeated."""
    effects = Effects()
    assert supports_user_asking(opened.store)
    first = await run_or_park(definition(SCRIPT, opened.store), gated_request("g", effects))
    assert isinstance(first, RunParked)
    deciding = opened.reopen()
    pending = await read_pending_ask(deciding, "g")
    assert first.ask == pending
    await approve(
        deciding,
        "g",
        step=first.ask.step,
        arguments_sha256=first.ask.arguments_sha256,
        decided_by="ana",
    )
    second = await resume_or_park(definition(SCRIPT, opened.reopen()), gated_request("g", effects))
    assert isinstance(second, RunParked)
    assert AskKind.QUESTION is second.ask.kind
    assert "Which account?" == second.ask.question
    assert {"refund:80": 1} == dict(effects.counts)
    await answer(opened.reopen(), "g", "the savings account", step=second.ask.step)
    done = await resume_or_park(definition(SCRIPT, opened.reopen()), gated_request("g", effects))
    assert isinstance(done, RunResult)
    assert StopReason.TASK_COMPLETED is done.stop_reason
    assert "the savings account" == done.steps[1].observation
    assert {"refund:80": 1, "submit": 1} == dict(effects.counts)
    log = await opened.reopen().read_log("g")
    validate_log(log, "g")
    assert 2 == len(log.asks) == len(log.answers)
    assert RunStatus.SUCCEEDED is run_status(log)


async def test_a_second_decision_for_one_ask_is_refused_by_the_store(opened: Opened) -> None:
    """Written straight to the store (past the lease), the second decision is refused and the
    first one stands."""
    effects = Effects()
    parked = await run_or_park(definition(SCRIPT, opened.store), gated_request("d", effects))
    assert isinstance(parked, RunParked)
    store = opened.reopen()
    assert isinstance(store, UserAsking)

    def decision(verdict: Verdict, reason: str | None) -> UserAnswered:
        return UserAnswered(
            "d", 0, verdict, parked.ask.arguments_sha256, None, reason, None, "x", "t"
        )

    await store.write_user_answered(decision(Verdict.APPROVE, None))
    with pytest.raises(DuplicateRecordError, match=r"(?i)user_?answered"):
        await store.write_user_answered(decision(Verdict.REJECT, "no"))
    log = await opened.reopen().read_log("d")
    assert [Verdict.APPROVE] == [a.verdict for a in log.answers]
    assert pending_ask(log) is None
    with pytest.raises(DuplicateRecordError, match=r"(?i)user_?asked"):
        await store.write_user_asked(parked.ask)


async def test_the_records_read_back_equal_the_records_written(opened: Opened) -> None:
    """The ask read back through another object is the one the loop returned."""
    parked = await run_or_park(definition(SCRIPT, opened.store), gated_request("e", Effects()))
    assert isinstance(parked, RunParked)
    log = await opened.reopen().read_log("e")
    assert (parked.ask,) == log.asks
    assert RunStatus.WAITING_APPROVAL is run_status(log)
