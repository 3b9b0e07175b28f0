"""RunStore contract, several records in one write: for stores that implement
``polyloop.ports.RecordBatching`` (design 0055).

The loop hands such a store the records that follow each other with nothing but computation
between them (a model result and the action intent after it, a step and the next model intent)
in one ``write_records`` call. The log must come out exactly as if each had been written on its
own; a refused record stores none of its batch; a batch cut short leaves a prefix of it. The
capability is decided structurally: a store without ``write_records`` skips these rules with one
report line (the loop then writes every record on its own); a store may also declare capability
``record_batching`` off. Each failure message starts with ``RunStore rule '<rule>'``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from polyloop.errors import DuplicateRecordError, RunAlreadyStartedError
from polyloop.ports import RecordBatching, RunLog, RunStore, UserAsking
from polyloop.types import Intent, ModelCallResult, StepCompleted
from polyloop_contract._checks import Rule, shown
from polyloop_contract._records import (
    LogRecord,
    expected_log,
    full_run,
    run_finished,
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


batching_store = _store_support.capability_store_fixture(
    "batching_store",
    declared="record_batching",
    seam=RecordBatching,
    rules="batching",
    without="so the loop writes each record on its own (nothing else changes)",
)


def loop_batches(records: Sequence[LogRecord]) -> list[list[LogRecord]]:
    """``records`` grouped as the loop groups them: a model result with the record after it, a
    step with the model intent after it; everything else on its own."""
    batches: list[list[LogRecord]] = []
    for record in records:
        last = batches[-1] if batches else None
        joins = last is not None and (
            isinstance(last[-1], ModelCallResult)
            or (isinstance(last[-1], StepCompleted) and isinstance(record, Intent))
        )
        if joins and last is not None:
            last.append(record)
        else:
            batches.append([record])
    return batches


async def _write_batch(rule: Rule, store: RunStore, batch: Sequence[LogRecord]) -> None:
    assert isinstance(store, RecordBatching)
    kinds = ", ".join(type(record).__name__ for record in batch)
    run_id = batch[0].run_id if batch else "-"
    await rule.call(
        f"write_records([{kinds}]) of run {shown(run_id)}", store.write_records(list(batch))
    )


async def _read(rule: Rule, store: RunStore, run_id: str, whom: str) -> RunLog:
    return await rule.call(f"read_log({shown(run_id)}) on {whom}", store.read_log(run_id))


def _check_log(rule: Rule, got: RunLog, want: RunLog, whom: str, after: str) -> None:
    for name in ("started", "intents", "model_results", "steps", "finished", "asks", "answers"):
        rule.check(
            getattr(got, name) == getattr(want, name),
            f"after {after}, read_log on {whom}: RunLog.{name} is "
            f"{shown(getattr(got, name), 300)}, but the records written one by one would give "
            f"{shown(getattr(want, name), 300)}",
        )


async def _refused(
    rule: Rule,
    store: RunStore,
    batch: list[LogRecord],
    error: type[Exception],
    what: str,
) -> None:
    assert isinstance(store, RecordBatching)
    try:
        await asyncio.wait_for(store.write_records(batch), 30)
    except error:
        return
    except Exception as raised:
        rule.fail(
            f"write_records with {what} raised {type(raised).__name__}: {raised}; it must raise "
            f"{error.__name__}, as the record's own write does"
        )
    rule.fail(f"write_records with {what} was accepted; it must raise {error.__name__}")


# ---------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------


@aio
async def test_batched_records_read_back_as_written_one_by_one(
    batching_store: MakeStore, reopen: Reopen
) -> None:
    """A run written in the loop's batches (and an empty batch) reads back exactly as the same
    records written one by one: same records, same order, through the writing store and a
    second object on the same storage; a run written beside it one by one is untouched."""
    rule = Rule(SEAM, "batched records read back as written one by one")
    store = await batching_store()
    records = full_run("batched", 7)
    plain = full_run("one-by-one", 3)
    await _write_batch(rule, store, [])
    for batch in loop_batches(records):
        await _write_batch(rule, store, batch)
        if len(batch) == 1 and plain:
            await rule.call("a write of another run", write(store, plain.pop(0)))
    for record in plain:
        await rule.call("a write of another run", write(store, record))
    want = expected_log(records)
    got = await _read(rule, store, "batched", "the writing store")
    _check_log(rule, got, want, "the writing store", "the loop's batches")
    rule.check(got == want, "read_log of a batched run does not equal the records written")
    again = await reopen(store)
    _check_log(
        rule,
        await _read(rule, again, "batched", "a second store object"),
        want,
        "a second store object",
        "the loop's batches",
    )
    other = await _read(rule, again, "one-by-one", "a second store object")
    rule.check(
        other == expected_log(full_run("one-by-one", 3)),
        "a run written one by one beside a batched run does not read back as written",
    )
    rule.check(
        await _read(rule, again, "never-written", "a second store object") == RunLog(),
        "an empty write_records([]) created a log, or a run never written reads back non-empty",
    )


@aio
async def test_a_refused_record_stores_none_of_its_batch(
    batching_store: MakeStore, reopen: Reopen
) -> None:
    """A batch holding a duplicate (of the log, or of an earlier record of the same batch) is
    refused with DuplicateRecordError, and none of its records is stored."""
    rule = Rule(SEAM, "a refused record stores none of its batch")
    store = await batching_store()
    records = [run_started("refused"), *step_writes("refused", 0).records]
    for batch in loop_batches(records):
        await _write_batch(rule, store, batch)
    nxt = list(step_writes("refused", 1).records)
    await _refused(
        rule,
        store,
        [nxt[0], records[-1]],
        DuplicateRecordError,
        "a new intent and the step already stored",
    )
    await _refused(rule, store, [nxt[0], nxt[1], nxt[1]], DuplicateRecordError, "one result twice")
    want = expected_log(records)
    after = "two refused batches (a record of a refused batch was stored)"
    got = await _read(rule, store, "refused", "the writing store")
    _check_log(rule, got, want, "the writing store", after)
    again = await reopen(store)
    got = await _read(rule, again, "refused", "a second store object")
    _check_log(rule, got, want, "a second store object", after)
    await _write_batch(rule, store, nxt[:2])  # the refused records were not kept anywhere


@aio
async def test_a_second_run_started_or_finished_in_a_batch_is_refused(
    batching_store: MakeStore,
) -> None:
    """A RunStarted or RunFinished in a batch follows the rules of its own write: a second one
    is refused with RunAlreadyStartedError (also twice in one batch), storing nothing."""
    rule = Rule(SEAM, "a second head or tail in a batch is refused")
    store = await batching_store()
    steps = step_writes("headtail", 0)
    records = [run_started("headtail"), *steps.records]
    for batch in loop_batches(records):
        await _write_batch(rule, store, batch)
    later = step_writes("headtail", 1).records[0]
    await _refused(
        rule,
        store,
        [later, run_started("headtail")],
        RunAlreadyStartedError,
        "a second RunStarted",
    )
    tail = run_finished("headtail", (steps.step,))
    await _refused(rule, store, [tail, tail], RunAlreadyStartedError, "RunFinished twice")
    _check_log(
        rule,
        await _read(rule, store, "headtail", "the writing store"),
        expected_log(records),
        "the writing store",
        "refused batches with a second head or tail",
    )
    await _write_batch(rule, store, [tail])
    await _refused(rule, store, [tail], RunAlreadyStartedError, "a second RunFinished")


@aio
async def test_records_of_two_runs_are_refused(batching_store: MakeStore) -> None:
    """A batch whose records belong to two runs is refused with ValueError, storing nothing."""
    rule = Rule(SEAM, "a batch is of one run")
    store = await batching_store()
    await _refused(
        rule,
        store,
        [run_started("first-run"), run_started("second-run")],
        ValueError,
        "records of two runs",
    )
    for run_id in ("first-run", "second-run"):
        rule.check(
            await _read(rule, store, run_id, "the writing store") == RunLog(),
            f"a refused batch of two runs left records of run {run_id!r}",
        )


@aio
async def test_a_cut_short_batch_leaves_a_prefix(batching_store: MakeStore, reopen: Reopen) -> None:
    """A batch whose caller is cancelled while it is written leaves the log before it plus a
    prefix of the batch (none, some or all of it), never a later record without an earlier
    one."""
    rule = Rule(SEAM, "a batch cut short leaves a prefix of it")
    store = await batching_store()
    assert isinstance(store, RecordBatching)
    before = [run_started("cut"), *step_writes("cut", 0).records]
    for batch in loop_batches(before):
        await _write_batch(rule, store, batch)
    batch = [*step_writes("cut", 1).records, step_writes("cut", 2).records[0]]
    for delay in range(3):
        attempt = asyncio.ensure_future(store.write_records(batch))
        for _ in range(delay):
            await asyncio.sleep(0)
        attempt.cancel()
        try:
            await attempt
        except asyncio.CancelledError:
            pass
        except DuplicateRecordError:
            pass  # stored by an earlier attempt whose caller was cancelled too late
        except Exception as error:
            rule.fail(f"a cancelled write_records raised {type(error).__name__}: {error}")
    await asyncio.sleep(0.2)  # a store's thread may still be finishing the write
    got = await _read(rule, await reopen(store), "cut", "a second store object")
    prefixes = [expected_log(before + batch[:n]) for n in range(len(batch) + 1)]
    rule.check(
        got in prefixes,
        f"after a batch was cut short, the log holds {len(got.intents)} intents, "
        f"{len(got.model_results)} results and {len(got.steps)} steps: not the log before it "
        "plus a prefix of the batch",
    )


@aio
async def test_asks_and_answers_in_a_batch_keep_their_rules(
    batching_store: MakeStore, reopen: Reopen
) -> None:
    """On a store that also asks a person: a UserAsked batched after its model result reads
    back in RunLog.asks; a second ask or a second decision of a step in a batch is refused
    with DuplicateRecordError and stores nothing of that batch."""
    rule = Rule(SEAM, "asks and answers in a batch keep their rules")
    store = await batching_store()
    if not isinstance(store, UserAsking):
        pytest.skip(f"{type(store).__name__} does not implement polyloop.ports.UserAsking")
    run_id = "asked-in-batch"
    records: list[LogRecord] = [
        run_started(run_id, **{"request.tools.search.requires_approval": "true"})
    ]
    records += step_writes(run_id, 0).records
    asked = user_asked(run_id, 1)
    records += [*step_writes(run_id, 1).records[:2], asked]
    for batch in loop_batches(records):
        await _write_batch(rule, store, batch)
    answer = user_answered(asked)
    await _refused(rule, store, [answer, answer], DuplicateRecordError, "one decision twice")
    await _refused(rule, store, [asked], DuplicateRecordError, "a second UserAsked of a step")
    want = expected_log(records)
    _check_log(
        rule,
        await _read(rule, await reopen(store), run_id, "a second store object"),
        want,
        "a second store object",
        "a batched ask and refused batches of asks and answers",
    )
    await _write_batch(rule, store, [answer])
    log = await _read(rule, store, run_id, "the writing store")
    rule.check(
        log.answers == (answer,),
        f"a batched decision reads back as {shown(log.answers)}; it must be the one written",
    )
