"""RunStore contract, asking a person: for stores that implement ``polyloop.ports.UserAsking``.

A gated run (design 0037) writes ``UserAsked`` before a gated action's intent and
``UserAnswered`` once a person decided. A decision names the ask it answers by its step
(design 0059), so a store keeps at most one ask and one decision per step, reads each back
with the step it was written with, and never merges or refuses records for being alike in
anything else: two asks of one run alike but for their step are two asks. The capability is
decided structurally: a store that
does not implement it skips these rules with one report line saying so (gated runs are then
refused on it at start, every other run keeps working); a store may also declare capability
``user_asking`` off. Each failure message starts with ``RunStore rule '<rule>'``.
"""

from __future__ import annotations

import asyncio
import dataclasses

from polyloop.asking import Verdict
from polyloop.errors import DuplicateRecordError
from polyloop.ports import RunLog, RunStore, UserAsking
from polyloop_contract._checks import Rule, shown
from polyloop_contract._records import (
    LogRecord,
    approved_writes,
    expected_log,
    full_run,
    run_started,
    step_writes,
    user_answered,
    user_asked,
    write,
)
from polyloop_contract.suites import _store_support
from polyloop_contract.suites._store_support import (
    SEAM,
    MakeStore,
    Reopen,
    aio,
)

#: The fixtures every store suite shares (pytest finds a fixture by its name in the module).
reopen = _store_support.reopen
store_scope = _store_support.store_scope


asking_store = _store_support.capability_store_fixture(
    "asking_store",
    declared="user_asking",
    seam=UserAsking,
    rules="asking",
    without="so runs that wait for a person are refused on it at start (every other run is "
    "unaffected)",
)


def _gated_run(run_id: str) -> list[LogRecord]:
    """A run whose step 1 was asked about and approved, and whose step 3 waits for a person."""
    records: list[LogRecord] = [
        run_started(run_id, **{"request.tools.search.requires_approval": "true"})
    ]
    records += step_writes(run_id, 0).records
    records += approved_writes(run_id, 1)
    records += step_writes(run_id, 2).records
    tail = list(step_writes(run_id, 3).records)
    records += [*tail[:2], user_asked(run_id, 3)]
    return records


async def _write_all(rule: Rule, store: RunStore, records: list[LogRecord]) -> None:
    for number, record in enumerate(records, start=1):
        await rule.call(
            f"write #{number} ({type(record).__name__}) of run {shown(record.run_id)}",
            write(store, record),
        )


async def _read(rule: Rule, store: RunStore, run_id: str, whom: str) -> RunLog:
    return await rule.call(f"read_log({shown(run_id)}) on {whom}", store.read_log(run_id))


def _check_log(rule: Rule, got: RunLog, want: RunLog, whom: str) -> None:
    for name in ("asks", "answers", "intents", "steps"):
        rule.check(
            getattr(got, name) == getattr(want, name),
            f"read_log on {whom}: RunLog.{name} is {shown(getattr(got, name), 300)}, but the "
            f"records written were {shown(getattr(want, name), 300)} (in write order)",
        )
    rule.check(got == want, f"read_log on {whom} does not equal the records written")


async def _refused_duplicate(rule: Rule, store: RunStore, record: LogRecord, what: str) -> None:
    try:
        await asyncio.wait_for(write(store, record), 30)
    except DuplicateRecordError:
        return
    except Exception as error:
        rule.fail(
            f"a second {what} raised {type(error).__name__}: {error}; it must raise "
            "polyloop.errors.DuplicateRecordError and keep the first"
        )
    rule.fail(
        f"a second {what} was accepted; it must be refused with DuplicateRecordError (a "
        "decision is given once: a second one would let a run act twice on one ask)"
    )


# ---------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------


@aio
async def test_asks_and_answers_read_back_in_write_order(
    asking_store: MakeStore, reopen: Reopen
) -> None:
    """UserAsked and UserAnswered come back in RunLog.asks/answers, equal and in write order,
    through the store that wrote them and through a second object on the same storage; a run
    that asked nothing reads back with both empty."""
    rule = Rule(SEAM, "asks and answers read back in write order")
    store = await asking_store()
    records = _gated_run("gated")
    plain = full_run("plain", 2)
    await _write_all(rule, store, records)
    await _write_all(rule, store, plain)
    want = expected_log(records)
    _check_log(
        rule, await _read(rule, store, "gated", "the writing store"), want, "the writing store"
    )
    again = await reopen(store)
    _check_log(
        rule,
        await _read(rule, again, "gated", "a second store object"),
        want,
        "a second store object",
    )
    other = await _read(rule, again, "plain", "a second store object")
    rule.check(
        other.asks == () and other.answers == () and other == expected_log(plain),
        "read_log('plain') of a run that asked nothing holds asks/answers or differs from what "
        "was written; the records of one run never show in another",
    )


@aio
async def test_a_second_ask_of_a_step_is_refused(asking_store: MakeStore) -> None:
    """A second UserAsked for the same step is refused with DuplicateRecordError, and the log
    is unchanged."""
    rule = Rule(SEAM, "a second ask of a step is refused")
    store = await asking_store()
    records = _gated_run("twice-asked")
    await _write_all(rule, store, records)
    await _refused_duplicate(rule, store, user_asked("twice-asked", 3), "UserAsked of step 3")
    _check_log(
        rule,
        await _read(rule, store, "twice-asked", "the store"),
        expected_log(records),
        "the store",
    )


@aio
async def test_a_second_decision_for_one_ask_is_refused(
    asking_store: MakeStore, reopen: Reopen
) -> None:
    """A second UserAnswered for one ask is refused (also through a second store object), and
    the first decision stands."""
    rule = Rule(SEAM, "a decision is given once")
    store = await asking_store()
    records = _gated_run("decided")
    first = user_answered(user_asked("decided", 3))
    await _write_all(rule, store, [*records, first])
    second = user_answered(user_asked("decided", 3), Verdict.REJECT, reason="changed my mind")
    await _refused_duplicate(rule, store, second, "UserAnswered of step 3 (same store)")
    other = await reopen(store)
    await _refused_duplicate(rule, other, second, "UserAnswered of step 3 (second store object)")
    log = await _read(rule, other, "decided", "a second store object")
    rule.check(
        log.answers[-1:] == (first,),
        f"after a refused second decision the log's last answer is {shown(log.answers[-1:])}; "
        "the first decision must stand",
    )


@aio
async def test_two_deciders_at_once_one_wins(asking_store: MakeStore, reopen: Reopen) -> None:
    """Two store objects write a decision for the same ask at the same moment: exactly one is
    stored, the other gets DuplicateRecordError."""
    rule = Rule(SEAM, "of two simultaneous decisions exactly one wins")
    store = await asking_store()
    await _write_all(rule, store, _gated_run("raced"))
    other = await reopen(store)
    ask = user_asked("raced", 3)
    decisions = [
        user_answered(ask, Verdict.APPROVE),
        user_answered(ask, Verdict.REJECT, reason="no"),
    ]
    outcomes = await asyncio.gather(
        write(store, decisions[0]), write(other, decisions[1]), return_exceptions=True
    )
    refused = [o for o in outcomes if isinstance(o, DuplicateRecordError)]
    unexpected = [o for o in outcomes if isinstance(o, BaseException) and o not in refused]
    rule.check(
        not unexpected,
        f"a racing decision raised {shown(unexpected)}; only DuplicateRecordError may refuse one",
    )
    rule.check(
        len(refused) == 1,
        f"{2 - len(refused)} of two simultaneous decisions for one ask were stored; exactly "
        "one must be, the other refused with DuplicateRecordError",
    )
    log = await _read(rule, other, "raced", "a second store object")
    winner = decisions[outcomes.index(None)]
    rule.check(
        log.answers[-1:] == (winner,),
        "the stored decision is not the one whose write was acknowledged",
    )


@aio
async def test_alike_asks_of_two_steps_stay_two_asks(asking_store: MakeStore) -> None:
    """The same call asked about at step 1 and at step 3 (the two asks differ only in their
    step) is stored as two asks, each read back with its own step; the decision of step 1
    reads back as deciding step 1 only, and step 3 can still be decided once. A decision names
    its ask by the step (design 0059): a store that keyed asks or decisions by their content
    would refuse the second ask, or let one decision stand for both."""
    rule = Rule(SEAM, "an ask is named by its step")
    store = await asking_store()
    run_id = "alike"
    first = user_asked(run_id, 1)
    again = dataclasses.replace(first, step=3)
    records: list[LogRecord] = [
        run_started(run_id, **{"request.tools.search.requires_approval": "true"}),
        *step_writes(run_id, 0).records,
        *approved_writes(run_id, 1),
        *step_writes(run_id, 2).records,
        *list(step_writes(run_id, 3).records)[:2],
        again,
    ]
    await _write_all(rule, store, records)
    _check_log(
        rule, await _read(rule, store, run_id, "the store"), expected_log(records), "the store"
    )
    decision = user_answered(again, Verdict.REJECT, reason="asked twice")
    await rule.call(
        "write of the decision of step 3 (its ask alike the decided one of step 1)",
        write(store, decision),
    )
    log = await _read(rule, store, run_id, "the store")
    rule.check(
        [(a.step, a.verdict) for a in log.answers] == [(1, Verdict.APPROVE), (3, Verdict.REJECT)],
        f"after deciding step 1 then step 3, RunLog.answers reads back as "
        f"{shown([(a.step, a.verdict.value) for a in log.answers])}; each decision must keep "
        "the step of the ask it answers",
    )
