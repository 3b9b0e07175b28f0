"""RunStore contract: every rule of the store section of the spec that is visible from outside.

Each test is one rule; its failure message starts with ``RunStore rule '<rule>'``.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import cast

import pytest

from polyloop.errors import DuplicateRecordError, RunAlreadyStartedError
from polyloop.ports import RunLeasing, RunLog, RunStore
from polyloop.recovery import model_result_id
from polyloop.types import ModelCallResult, ModelReply, RunFinished, RunResult, StopReason
from polyloop_contract import _report
from polyloop_contract._checks import (
    CALL_TIMEOUT,
    Rule,
    call_parameters,
    check_parameters_no_io,
    check_parameters_shape,
    check_parameters_stable_no_secrets,
    clipped,
    resolve,
    shown,
)
from polyloop_contract._differences import describe, log_difference
from polyloop_contract._records import (
    AWKWARD_TEXT,
    LONG_OBSERVATION,
    LogRecord,
    action_writes,
    expected_log,
    full_run,
    method_for,
    model_failure_writes,
    parse_failure_writes,
    run_finished,
    run_started,
    write,
)
from polyloop_contract.capabilities import StoreCapabilities
from polyloop_contract.fixtures import StoreFactory, missing
from polyloop_contract.leaks import RefusedStore, find_secret
from polyloop_contract.suites import _store_support
from polyloop_contract.suites._store_support import (
    SEAM,
    MakeStore,
    Reopen,
    StoreScope,
    aio,
    make_store_maker,
    param_suffix,
    require_capability,
)

#: The fixtures every store suite shares (pytest finds a fixture by its name in the module).
reopen = _store_support.reopen
store_scope = _store_support.store_scope


@pytest.fixture
def make_store(polyloop_store_factory: StoreFactory, store_scope: StoreScope) -> MakeStore:
    return make_store_maker(polyloop_store_factory, store_scope)


async def _write_all(rule: Rule, store: RunStore, records: list[LogRecord]) -> None:
    for number, record in enumerate(records, start=1):
        await rule.call(
            f"{method_for(record)}({describe(record)}) (write #{number} of run {shown(record.run_id)})",
            write(store, record),
        )


async def _check_read(
    rule: Rule,
    store: RunStore,
    run_id: str,
    records: Sequence[LogRecord],
    situation: str,
    reading: str = "",
) -> None:
    """Read ``run_id`` (the call named ``read_log(<run_id>)`` plus ``reading``) and fail, with
    ``situation: <difference>``, unless the log holds exactly ``records``."""
    log = await rule.call(f"read_log({shown(run_id)}){reading}", store.read_log(run_id))
    difference = log_difference(expected_log(list(records)), log)
    rule.check(difference is None, f"{situation}: {difference}")


async def _expect_log(rule: Rule, store: RunStore, run_id: str, records: list[LogRecord]) -> None:
    situation = f"read_log({shown(run_id)}) after {len(records)} writes"
    await _check_read(rule, store, run_id, records, situation)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


@aio
async def test_unknown_run_reads_as_empty_log(make_store: MakeStore) -> None:
    """read_log of a run_id never written returns RunLog(), raises nothing, and creates nothing."""
    rule = Rule(SEAM, "unknown run reads as empty")
    store = await make_store()
    log = await rule.call(
        "read_log('never-written') on a fresh store", store.read_log("never-written")
    )
    rule.check(
        log == RunLog(), f"read_log of a run never written returned {shown(log, 300)}, not RunLog()"
    )
    await _write_all(rule, store, full_run("written", 2))
    log = await rule.call("read_log('still-unknown')", store.read_log("still-unknown"))
    rule.check(
        log == RunLog(),
        f"with run 'written' stored, read_log('still-unknown') returned {shown(log, 300)}, not RunLog()",
    )
    # Reading must not create the run: starting it afterwards is a first start.
    await rule.call(
        "write_run_started for a run_id that was only read before (reading must not create it)",
        store.write_run_started(run_started("still-unknown")),
    )


# ---------------------------------------------------------------------------
# Round trips
# ---------------------------------------------------------------------------


def _round_trip_case(kind: str) -> list[LogRecord]:
    run_id = f"round-trip-{kind}"
    start = run_started(
        run_id,
        **{
            "request.binding.é ü 中文": AWKWARD_TEXT,
            "request.empty": "",
            "request.long": "x" * 10_000,
            "event_sink.kind": 'json: {"a": [1, 2]}',
        },
    )
    head: list[LogRecord] = [start]
    if kind == "run_started":
        return head
    if kind == "run_started_with_start_time":
        # A field added after schema 1.0 (design 0061): a store keeps it like any other.
        return [replace(start, started_at="2026-01-02T03:04:05+00:00")]
    if kind == "step_completed_long_observation":
        return [*head, *action_writes(run_id, 0, observation=LONG_OBSERVATION).records]
    failed = model_failure_writes(run_id, 0)
    head.append(failed.model_intent)
    if kind == "intent_model_call":
        return head
    if kind == "model_result_failure":
        return [*head, failed.model_result, failed.step_completed]
    reply = ModelReply(None, AWKWARD_TEXT, "")
    head.append(ModelCallResult(run_id, model_result_id(0), reply, None))
    if kind == "model_result_reply":
        return head
    if kind == "step_completed_without_action":
        return [*head, parse_failure_writes(run_id, 0).step_completed]
    action = action_writes(run_id, 0)
    assert action.action_intent is not None
    head.append(action.action_intent)
    if kind == "intent_action":
        return head
    head.append(action.step_completed)
    if kind == "step_completed_with_action":
        return head
    finished = RunFinished(
        run_id,
        RunResult(
            run_id=run_id,
            stop_reason=StopReason.TASK_COMPLETED,
            final_answer=None,
            steps=(action.step,),
            event_delivery_failures=3,
        ),
    )
    return [*head, finished]


ROUND_TRIP_KINDS = (
    "run_started",
    "run_started_with_start_time",
    "intent_model_call",
    "model_result_reply",
    "model_result_failure",
    "intent_action",
    "step_completed_with_action",
    "step_completed_without_action",
    "step_completed_long_observation",
    "run_finished",
)


@aio
@pytest.mark.parametrize("kind", ROUND_TRIP_KINDS)
async def test_records_round_trip_exactly(make_store: MakeStore, kind: str) -> None:
    """Every field of every record kind reads back equal to what was written."""
    rule = Rule(SEAM, "records round-trip exactly")
    store = await make_store()
    records = _round_trip_case(kind)
    await _write_all(rule, store, records)
    await _expect_log(rule, store, records[0].run_id, records)


@aio
async def test_write_order_kept(make_store: MakeStore) -> None:
    """Intents, model results and steps read back in the order they were written."""
    rule = Rule(SEAM, "write order kept")
    store = await make_store()
    records = full_run("ordered", 12)
    await _write_all(rule, store, records)
    await _expect_log(rule, store, "ordered", records)


# ---------------------------------------------------------------------------
# Many runs
# ---------------------------------------------------------------------------


@aio
async def test_runs_isolated_under_concurrency(make_store: MakeStore) -> None:
    """Forty runs written concurrently, interleaved, each read back exactly its own records."""
    rule = Rule(SEAM, "runs isolated")
    store = await make_store()
    shuffle = random.Random(20260810)
    runs = {f"concurrent-{n:02d}": full_run(f"concurrent-{n:02d}", 1 + n % 5) for n in range(40)}

    async def one_run(records: list[LogRecord]) -> None:
        for record in records:
            await rule.call(
                f"{method_for(record)}({describe(record)}) of run {shown(record.run_id)}",
                write(store, record),
            )
            for _ in range(shuffle.randint(0, 2)):
                await asyncio.sleep(0)

    order = list(runs.values())
    shuffle.shuffle(order)
    await asyncio.gather(*(one_run(records) for records in order))
    for run_id, records in runs.items():
        situation = f"after 40 runs were written concurrently, run {shown(run_id)}"
        await _check_read(rule, store, run_id, records, situation)


@aio
async def test_no_hidden_current_run(make_store: MakeStore) -> None:
    """Writes go to the run named in each record, not to the run started last."""
    rule = Rule(SEAM, "no hidden current run")
    store = await make_store()
    first, second = full_run("run-A", 3), full_run("run-B", 2)
    # Start both, then alternate one write of each: a store that remembers the run it
    # started last files run-A's records under run-B.
    await _write_all(rule, store, [first[0], second[0]])
    rest_a, rest_b = first[1:], second[1:]
    for index in range(max(len(rest_a), len(rest_b))):
        for rest in (rest_a, rest_b):
            if index < len(rest):
                await _write_all(rule, store, [rest[index]])
    for run_id, records in (("run-A", first), ("run-B", second)):
        situation = (
            f"runs 'run-A' and 'run-B' were started, then written alternately; run {shown(run_id)}"
        )
        await _check_read(rule, store, run_id, records, situation)


PLAIN_LOOKALIKE_IDS = (
    "run-a",
    "RUN-A",
    "Run-A",
    "run-a ",
    " run-a",
    "run_a",
    "run.a",
    "run-a.jsonl",
    "run/a",
    "run\\a",
    "../run-a",
    "run-a/..",
    "run a",
    "rün-a",
    "run-a-2",
    "run-a-20",
)
EXOTIC_IDS = (
    "run-\x00-a",
    "run-\x00-b",
    "r" * 10_000,
    "r" * 9_999 + "s",
    "caf\u00e9",  # NFC
    "cafe\u0301",  # NFD: the same text, another normalisation
    "\u05e8\u05d9\u05e6\u05d4 \U0001f600",
    "/etc/passwd",
    "C:\\Windows\\x",
    "\n\t\r",
)


async def _check_ids(rule: Rule, store: RunStore, ids: tuple[str, ...]) -> None:
    runs = {run_id: full_run(run_id, 1 + n % 3) for n, run_id in enumerate(ids)}
    for records in runs.values():
        await _write_all(rule, store, records)
    for run_id, records in runs.items():
        situation = f"run_ids that look alike must stay apart; run {shown(run_id)}"
        await _check_read(rule, store, run_id, records, situation)


@aio
async def test_lookalike_run_ids_never_collide(make_store: MakeStore) -> None:
    """run_ids differing only in case, punctuation, path characters or accents stay apart."""
    rule = Rule(SEAM, "distinct run_ids never collide")
    await _check_ids(rule, await make_store(), PLAIN_LOOKALIKE_IDS)


@aio
async def test_exotic_run_ids_never_collide(
    request: pytest.FixtureRequest,
    make_store: MakeStore,
    polyloop_store_capabilities: StoreCapabilities,
) -> None:
    """run_ids with NUL, 10 000 characters, two normalisations of one text, stay apart."""
    require_capability(request, polyloop_store_capabilities, "exotic_run_ids")
    rule = Rule(SEAM, "distinct run_ids never collide")
    await _check_ids(rule, await make_store(), EXOTIC_IDS)


# ---------------------------------------------------------------------------
# Atomicity as seen by readers
# ---------------------------------------------------------------------------


@aio
async def test_step_completed_atomic_for_readers(make_store: MakeStore) -> None:
    """Readers polling during the writes see each step whole, and only prefixes of the writes."""
    atomic = Rule(SEAM, "write_step_completed is atomic")
    prefix = Rule(SEAM, "readers see a prefix of the writes")
    store = await make_store()
    run_id = "atomic"
    records: list[LogRecord] = [run_started(run_id)]
    for k in range(25):
        records += action_writes(run_id, k).records
    written = expected_log(records)
    done = asyncio.Event()
    observed = 0

    async def writer() -> None:
        try:
            for record in records:
                await atomic.call(f"{method_for(record)}({describe(record)})", write(store, record))
                await asyncio.sleep(0)
        finally:
            done.set()

    async def reader() -> None:
        nonlocal observed
        while not done.is_set():
            log = await atomic.call(
                f"read_log({shown(run_id)}) during the writes", store.read_log(run_id)
            )
            observed += 1
            for position, step in enumerate(log.steps):
                atomic.check(
                    position < len(written.steps) and step == written.steps[position],
                    f"a reader saw steps #{position} as {shown(step, 300)}; the step written there is "
                    f"{shown(written.steps[position] if position < len(written.steps) else None, 300)}. "
                    "The action result and the step record must become visible together",
                )
            for name in ("intents", "model_results", "steps"):
                seen, wrote = tuple(getattr(log, name)), getattr(written, name)
                prefix.check(
                    seen == wrote[: len(seen)],
                    f"a reader saw {name} that are not a prefix of the writes "
                    f"({len(seen)} records, first difference: "
                    f"{log_difference(_only(name, wrote[: len(seen)]), _only(name, seen))})",
                )
            await asyncio.sleep(0)

    tasks = [asyncio.ensure_future(part) for part in (writer(), reader(), reader(), reader())]
    try:
        await asyncio.gather(*tasks)
    finally:  # one failed: stop the others before the rule ends
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    atomic.check(observed > 0, "no read completed while the steps were written")


def _only(name: str, records: tuple[object, ...]) -> RunLog:
    """A log holding only ``records`` in its field ``name`` (to describe a difference)."""
    if name == "intents":
        return RunLog(intents=records)  # type: ignore[arg-type]
    if name == "model_results":
        return RunLog(model_results=records)  # type: ignore[arg-type]
    return RunLog(steps=records)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Start and finish happen once
# ---------------------------------------------------------------------------


async def _expect_refusal(rule: Rule, what: str, awaitable: object) -> None:
    try:
        await rule.call(what, awaitable)  # type: ignore[arg-type]
    except AssertionError as violation:
        cause = violation.__cause__
        if isinstance(cause, RunAlreadyStartedError):
            return
        if cause is not None:
            rule.fail(
                f"{what} raised {type(cause).__name__}: {cause}; it must raise "
                "polyloop.errors.RunAlreadyStartedError (or a subclass)"
            )
        raise
    rule.fail(f"{what} was accepted; it must be refused with RunAlreadyStartedError")


@aio
async def test_second_run_started_refused(make_store: MakeStore) -> None:
    """A second RunStarted for a run_id raises RunAlreadyStartedError and overwrites nothing."""
    rule = Rule(SEAM, "second RunStarted refused")
    store = await make_store()
    records = full_run("started-twice", 1, finish=False)
    await _write_all(rule, store, records)
    await _expect_refusal(
        rule,
        "a second write_run_started with another snapshot",
        store.write_run_started(run_started("started-twice", **{"model_client.model": "other"})),
    )
    await _expect_refusal(
        rule,
        "a second write_run_started equal to the first",
        store.write_run_started(run_started("started-twice")),
    )
    await _expect_log(rule, store, "started-twice", records)


@aio
async def test_second_run_finished_refused(make_store: MakeStore) -> None:
    """A second RunFinished for a run_id raises RunAlreadyStartedError and overwrites nothing."""
    rule = Rule(SEAM, "second RunFinished refused")
    store = await make_store()
    records = full_run("finished-twice", 2)
    await _write_all(rule, store, records)
    other = run_finished("finished-twice", reason=StopReason.CANCELLED)
    await _expect_refusal(rule, "a second write_run_finished", store.write_run_finished(other))
    await _expect_log(rule, store, "finished-twice", records)


@aio
async def test_racing_starts_have_one_winner(make_store: MakeStore) -> None:
    """Five concurrent RunStarted for one run_id: exactly one wins and its record is kept."""
    rule = Rule(SEAM, "racing starts have one winner")
    store = await make_store()
    contenders = [run_started("raced", **{"request.contender": str(n)}) for n in range(5)]
    results = await asyncio.gather(
        *(
            rule.call(f"write_run_started (contender {n})", store.write_run_started(record))
            for n, record in enumerate(contenders)
        ),
        return_exceptions=True,
    )
    winners = [n for n, result in enumerate(results) if not isinstance(result, BaseException)]
    for n, result in enumerate(results):
        if isinstance(result, BaseException):
            cause = result.__cause__
            rule.check(
                isinstance(cause, RunAlreadyStartedError),
                f"contender {n} failed with {type(cause or result).__name__}: {cause or result}, "
                "not RunAlreadyStartedError",
            )
    rule.check(
        len(winners) == 1,
        f"{len(winners)} of 5 concurrent write_run_started calls for one run_id succeeded; "
        "exactly one must, the others must get RunAlreadyStartedError",
    )
    log = await rule.call("read_log('raced')", store.read_log("raced"))
    rule.check(
        log.started == contenders[winners[0]],
        f"contender {winners[0]} won, but the stored RunStarted is {shown(log.started, 300)}",
    )


# ---------------------------------------------------------------------------
# A record written twice: refused, or kept where readers see it; never dropped or merged
# ---------------------------------------------------------------------------


def _duplicates(run_id: str) -> list[tuple[str, LogRecord]]:
    """Second records of keys a log holds once; each differs from the first in content where
    it can, so that keeping only one of the two (dropping or merging) shows."""
    first = action_writes(run_id, 0)
    changed = action_writes(run_id, 0, observation="a different observation")
    assert first.action_intent is not None
    return [
        ("the same model-call intent again", first.model_intent),
        ("a second action intent with the same result_id", first.action_intent),
        (
            f"a second ModelCallResult of result_id {model_result_id(0)!r}",
            model_failure_writes(run_id, 0).model_result,
        ),
        ("a second StepCompleted of step 0", changed.step_completed),
    ]


@aio
@pytest.mark.parametrize(
    "which", range(4), ids=["model_intent", "action_intent", "model_result", "step"]
)
async def test_duplicate_writes_are_never_dropped_or_merged(
    request: pytest.FixtureRequest, make_store: MakeStore, which: int
) -> None:
    """A second record of one key is refused with DuplicateRecordError (leaving the log as it
    was) or, where a store keeps it, read back after the first: never silently dropped, never
    merged into the first."""
    rule = Rule(SEAM, "duplicate writes are never dropped or merged")
    store = await make_store()
    run_id = "written-twice"
    records: list[LogRecord] = [run_started(run_id), *action_writes(run_id, 0).records]
    await _write_all(rule, store, records)
    what, duplicate = _duplicates(run_id)[which]
    try:
        await write(store, duplicate)
    except DuplicateRecordError:
        await _expect_log(rule, store, run_id, records)
        return
    except Exception as error:
        rule.fail(
            f"writing {what} ({describe(duplicate)}) raised {type(error).__name__}: {error}; a "
            "store that refuses it must raise polyloop.errors.DuplicateRecordError"
        )
    kept = await rule.call(f"read_log({shown(run_id)})", store.read_log(run_id))
    difference = log_difference(expected_log([*records, duplicate]), kept)
    rule.check(
        difference is None,
        f"writing {what} ({describe(duplicate)}) was accepted, but the log does not hold both "
        f"records in write order ({difference}): the store dropped or merged a write. Refuse "
        "it with DuplicateRecordError instead",
    )
    _report.note(
        request.config,
        f"NOTE RunStore keeps records written twice{param_suffix(request)} instead of refusing "
        "them with DuplicateRecordError; resume then calls such a log corrupt",
    )


# ---------------------------------------------------------------------------
# Durability
# ---------------------------------------------------------------------------


@aio
async def test_prefix_durability_across_reopen(make_store: MakeStore, reopen: Reopen) -> None:
    """After every acknowledged write, a reopened store holds that write and all before it."""
    rule = Rule(SEAM, "prefix durability")
    store = await make_store()
    other = full_run("neighbour", 1)
    await _write_all(rule, store, other)
    records = full_run("durable", 3)
    for number, record in enumerate(records, start=1):
        await _write_all(rule, store, [record])
        fresh = await reopen(store)
        situation = (
            f"after reopen, write #{number} of run 'durable' ({describe(record)}) was "
            "acknowledged, but the reopened store reads"
        )
        await _check_read(
            rule, fresh, "durable", records[:number], situation, " on the reopened store"
        )
    fresh = await reopen(store)
    situation = "after reopen, run 'neighbour'"
    await _check_read(rule, fresh, "neighbour", other, situation, " on the reopened store")


@aio
async def test_appends_continue_after_reopen(make_store: MakeStore, reopen: Reopen) -> None:
    """A reopened store appends after what was there, and still refuses a second start."""
    rule = Rule(SEAM, "appends continue after reopen")
    store = await make_store()
    records = full_run("continued", 4)
    half = len(records) // 2
    await _write_all(rule, store, records[:half])
    second = await reopen(store)
    await _write_all(rule, second, records[half:])
    third = await reopen(second)
    log = await rule.call("read_log('continued') after two reopens", third.read_log("continued"))
    difference = log_difference(expected_log(records), log)
    rule.check(
        difference is None,
        f"wrote {half} records, reopened, wrote {len(records) - half} more, reopened: {difference}",
    )
    await _expect_refusal(
        Rule(SEAM, "second RunStarted refused"),
        "write_run_started on a reopened store for a run started before the reopen",
        third.write_run_started(run_started("continued")),
    )


@aio
async def test_two_store_objects_keep_each_others_writes(
    make_store: MakeStore, reopen: Reopen
) -> None:
    """Two store objects on one storage (two processes) writing different runs lose nothing."""
    rule = Rule(SEAM, "store objects sharing storage keep each other's writes")
    first = await make_store()
    second = await reopen(first)
    runs = {
        "from-first": (first, full_run("from-first", 3)),
        "from-second": (second, full_run("from-second", 3)),
    }
    longest = max(len(records) for _, records in runs.values())
    for index in range(longest):
        for store, records in runs.values():
            if index < len(records):
                await _write_all(rule, store, [records[index]])
    third = await reopen(second)
    for run_id, (_, records) in runs.items():
        situation = (
            "two store objects on one storage wrote runs 'from-first' and 'from-second' "
            f"alternately; a third object reads run {shown(run_id)}"
        )
        await _check_read(rule, third, run_id, records, situation, " on a third store object")


@aio
async def test_a_write_is_seen_at_once_through_another_store_object(
    make_store: MakeStore, reopen: Reopen
) -> None:
    """A store object that has read a run sees each write made through another object on the
    same storage at its very next read: no per-object cache answers for the storage."""
    rule = Rule(SEAM, "a write is seen at once through every store object on the storage")
    writer = await make_store()
    reader = await reopen(writer)
    run_id = "seen-at-once"
    records = full_run(run_id, 3)
    for number, record in enumerate(records, start=1):
        await rule.call(
            f"read_log({run_id!r}) on the second store object before write #{number}",
            reader.read_log(run_id),
        )
        await _write_all(rule, writer, [record])
        log = await rule.call(
            f"read_log({run_id!r}) on the second store object right after write #{number}",
            reader.read_log(run_id),
        )
        difference = log_difference(expected_log(records[:number]), log)
        rule.check(
            difference is None,
            f"write #{number} of run {run_id!r} ({describe(record)}) was acknowledged by one "
            f"store object, but another object on the same storage, which had read the run "
            f"just before, reads: {difference}. A read must show every acknowledged write, "
            "whichever object made it: a cache kept per store object must not answer for the "
            "storage",
        )


@aio
async def test_racing_starts_across_store_objects_have_one_winner(
    make_store: MakeStore, reopen: Reopen
) -> None:
    """Two store objects on one storage (two processes) starting one run: exactly one wins."""
    rule = Rule(SEAM, "racing starts have one winner")
    first = await make_store()
    await rule.call("read_log('raced-across') before the race", first.read_log("raced-across"))
    second = await reopen(first)
    await rule.call("read_log('raced-across') before the race", second.read_log("raced-across"))
    contenders = [run_started("raced-across", **{"request.process": str(n)}) for n in range(2)]
    results = await asyncio.gather(
        *(
            rule.call(f"write_run_started on store object {n + 1}", store.write_run_started(record))
            for n, (store, record) in enumerate(zip((first, second), contenders, strict=True))
        ),
        return_exceptions=True,
    )
    winners = [n for n, result in enumerate(results) if not isinstance(result, BaseException)]
    for n, result in enumerate(results):
        if isinstance(result, BaseException):
            cause = result.__cause__
            rule.check(
                isinstance(cause, RunAlreadyStartedError),
                f"store object {n + 1} failed with {type(cause or result).__name__}: "
                f"{cause or result}, not RunAlreadyStartedError",
            )
    rule.check(
        len(winners) == 1,
        f"{len(winners)} of 2 store objects on one storage started the same run; the storage "
        "must decide: exactly one wins, the other gets RunAlreadyStartedError",
    )
    third = await reopen(first)
    log = await rule.call(
        "read_log('raced-across') on a third store object", third.read_log("raced-across")
    )
    rule.check(
        log.started == contenders[winners[0]],
        f"store object {winners[0] + 1} won, but the stored RunStarted is {shown(log.started, 300)}",
    )


# ---------------------------------------------------------------------------
# Aliasing
# ---------------------------------------------------------------------------


@aio
async def test_records_never_alias(make_store: MakeStore) -> None:
    """A log read earlier never changes later, and the records handed in are never altered."""
    rule = Rule(SEAM, "records never alias")
    store = await make_store()
    records = full_run("alias", 3)
    pristine = full_run("alias", 3)  # equal values, separate objects
    half = len(records) // 2
    await _write_all(rule, store, records[:half])
    early = await rule.call("read_log('alias')", store.read_log("alias"))
    for name in ("intents", "model_results", "steps"):
        rule.check(
            isinstance(getattr(early, name), tuple),
            f"read_log returned RunLog.{name} as {type(getattr(early, name)).__name__}; "
            "return a tuple: a live container lets later writes (or the caller) change it",
        )
    difference = log_difference(expected_log(pristine[:half]), early)
    rule.check(difference is None, f"after {half} writes: {difference}")
    await _write_all(rule, store, records[half:])
    difference = log_difference(expected_log(pristine[:half]), early)
    rule.check(
        difference is None,
        f"a RunLog returned after {half} writes changed when later records were written: {difference}",
    )
    for number, (given, original) in enumerate(zip(records, pristine, strict=True), start=1):
        rule.check(
            given == original,
            f"write #{number} ({describe(original)}): the store altered the record object it "
            f"was given; it now reads {shown(given, 300)}",
        )
    late = await rule.call("read_log('alias')", store.read_log("alias"))
    difference = log_difference(expected_log(pristine), late)
    rule.check(difference is None, f"after all writes: {difference}")


# ---------------------------------------------------------------------------
# parameters()
# ---------------------------------------------------------------------------


@aio
async def test_parameters_are_synchronous_and_str_valued(make_store: MakeStore) -> None:
    """parameters() is a plain method returning a mapping of str to str."""
    check_parameters_shape(SEAM, await make_store())


@aio
async def test_parameters_do_no_io_and_are_cheap(make_store: MakeStore) -> None:
    """parameters() opens no file, socket or process, does not sleep, and returns at once."""
    check_parameters_no_io(SEAM, await make_store())


@aio
async def test_parameters_are_stable_and_hold_no_secrets(make_store: MakeStore) -> None:
    """parameters() answers the same twice and names no credential."""
    check_parameters_stable_no_secrets(SEAM, await make_store())


@aio
async def test_parameters_name_no_location(make_store: MakeStore) -> None:
    """Two stores the factory made, each on storage of its own, report the same parameters:
    where the logs live (a path, a directory, a database or schema name) does not change what
    a run does, and in the snapshot it would make a store that was copied, moved or restored
    elsewhere refuse to resume its runs."""
    rule = Rule(SEAM, "parameters() name no location")
    first, second = await make_store(), await make_store()
    reported = [_parameters_of(rule, store) for store in (first, second)]
    differing = sorted(
        key
        for key in set(reported[0]) | set(reported[1])
        if reported[0].get(key) != reported[1].get(key)
    )
    rule.check(
        not differing,
        "two stores the factory made on storage of their own report different parameters "
        + ", ".join(
            f"{key!r}: {shown(reported[0].get(key))} and {shown(reported[1].get(key))}"
            for key in differing
        )
        + ". Every run's snapshot records them and resume compares them, so a store copied, "
        "moved or restored elsewhere would refuse to resume its runs; report what changes "
        "how a run behaves (the kind, a format setting), never where the logs are",
    )


def _parameters_of(rule: Rule, store: RunStore) -> dict[str, object]:
    value = call_parameters(rule, store)
    rule.check(isinstance(value, Mapping), f"parameters() returned {type(value).__name__}")
    assert isinstance(value, Mapping)
    return dict(value)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


_REFUSED_RUN = "polyloop-contract-refused"

#: What the rule asks of a refused store: each call on a fresh store object.
_REFUSED_CALLS: tuple[tuple[str, Callable[[RunStore], Awaitable[object]]], ...] = (
    (f"read_log({_REFUSED_RUN!r})", lambda store: store.read_log(_REFUSED_RUN)),
    (
        f"write_run_started(RunStarted of run {_REFUSED_RUN!r})",
        lambda store: store.write_run_started(run_started(_REFUSED_RUN)),
    ),
    (
        f"acquire_run_lease({_REFUSED_RUN!r})",
        lambda store: cast(RunLeasing, store).acquire_run_lease(_REFUSED_RUN),
    ),
)


async def _raised(awaitable: Awaitable[object]) -> BaseException | None:
    """What awaiting raises (``None``: it returned), caught in a frame holding no secret."""
    try:
        await asyncio.wait_for(_awaited(awaitable), CALL_TIMEOUT)
    except Exception as error:
        return error
    return None


async def _awaited(awaitable: Awaitable[object]) -> object:
    return await awaitable


async def _make_refused(
    rule: Rule, refused: RefusedStore, scope: StoreScope
) -> RunStore | BaseException:
    """A store from ``refused.make()``, or what making it raised."""
    try:
        made: object = await resolve(refused.make())
    except Exception as error:
        return error
    return await scope.adopt(rule, made, f"the {refused.name} store's make()")


@aio
async def test_errors_hold_no_secrets(
    request: pytest.FixtureRequest,
    polyloop_store_refused: Sequence[RefusedStore] | None,
    polyloop_store_capabilities: StoreCapabilities,
    store_scope: StoreScope,
) -> None:
    """A store its storage refuses raises on every read and write (an unreachable store never
    reads as an empty log), and nothing it raises carries a secret it was given: not the
    message, nor any exception of the chain (``__cause__``, ``__context__``), their
    attributes, or the local variables of their tracebacks."""
    require_capability(request, polyloop_store_capabilities, "credentials")
    if not polyloop_store_refused:
        missing(
            request,
            "polyloop_store_refused",
            "RunStore errors",
            "a sequence of polyloop_contract.RefusedStore: stores wired to a closed port or "
            "given a wrong password, with that password; or declare StoreCapabilities(off="
            "{'credentials': '<why>'}) in polyloop_store_capabilities",
        )
    rule = Rule(SEAM, "errors hold no secrets")
    for refused in polyloop_store_refused:
        for what, call in _REFUSED_CALLS:
            store = await _make_refused(rule, refused, store_scope)
            if isinstance(store, BaseException):
                error: BaseException | None = store
                what = f"making the {refused.name} store"
            elif what.startswith("acquire_run_lease") and not isinstance(store, RunLeasing):
                continue
            else:
                error = await _raised(call(store))
                what = f"{what} on the {refused.name} store"
            rule.check(
                error is not None,
                f"{what} returned instead of raising; a store whose storage refuses it must say "
                "so (read as an empty log, an unreachable store makes the loop start the run "
                "afresh)",
            )
            assert error is not None
            where = find_secret(error, refused.secrets)
            rule.check(
                where is None,
                f"{what} raised {type(error).__name__}: {clipped(str(error))} — and a secret it "
                f"was given travels with it, in {where}. Raise your error outside the except "
                "block that caught the driver's (`from None` only hides the driver's error from "
                "printed tracebacks; it stays attached as __context__), and keep connection "
                "strings out of the local variables of the frames it passes through",
            )
