"""Section 4 of the spec, run against every store (memory, jsonl, sqlite)."""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import PolyLoopError, RunAlreadyStartedError
from polyloop.ports import RunListing, RunLog, RunStore, StoreClosing
from polyloop.types import IntentKind, RunStarted
from tests.stores._helpers import (
    HOSTILE_RUN_IDS,
    STORE_KINDS,
    Opened,
    close_store,
    expected_log,
    finished,
    intent,
    model_result,
    open_store,
    started,
    step_completed,
    storage_entries,
    write_run,
)


def test_every_store_implements_the_protocol(opened: Opened) -> None:
    """Every shipped store satisfies the RunStore protocol structurally."""
    assert isinstance(opened.store, RunStore)


async def test_unknown_run_reads_as_empty_log_and_creates_nothing(
    opened: Opened, tmp_path: object
) -> None:
    """Reading a run never written returns RunLog() and leaves the storage as it was."""
    before = storage_entries(str(tmp_path))
    assert await opened.store.read_log("never-written") == RunLog()
    assert storage_entries(str(tmp_path)) == before


async def test_unknown_run_next_to_written_runs_reads_as_empty(opened: Opened) -> None:
    """A run never written reads as RunLog() even when other runs are stored."""
    await write_run(opened.store, "written", 1)
    assert await opened.store.read_log("other") == RunLog()


async def test_a_whole_run_reads_back_equal_in_write_order(opened: Opened) -> None:
    """Every record of a finished run reads back equal to what was written, in write order."""
    expected = await write_run(opened.store, "r-1", 5)
    assert await opened.store.read_log("r-1") == expected


async def test_an_unfinished_run_reads_back_without_finish(opened: Opened) -> None:
    """A run without RunFinished reads back whole, with finished None."""
    expected = await write_run(opened.store, "open", 3, finish=False)
    log = await opened.store.read_log("open")
    assert log == expected
    assert log.finished is None


async def test_a_failed_model_call_reads_back(opened: Opened) -> None:
    """A model result that records a failure (no reply) reads back as written."""
    await opened.store.write_run_started(started("f"))
    await opened.store.write_intent(intent("f", IntentKind.MODEL_CALL, 0))
    await opened.store.write_model_call_result(model_result("f", 0, failed=True))
    log = await opened.store.read_log("f")
    assert log.model_results == (model_result("f", 0, failed=True),)
    assert log.model_results[0].reply is None


async def test_records_survive_reopening_the_storage(opened: Opened) -> None:
    """A new store object on the same storage reads the records another one wrote."""
    expected = await write_run(opened.store, "kept", 4)
    assert await opened.reopen().read_log("kept") == expected


async def test_runs_side_by_side_never_see_each_others_records(opened: Opened) -> None:
    """Two runs in one store each read back only their own records."""
    await write_run(opened.store, "a", 2)
    await write_run(opened.store, "b", 3, finish=False)
    assert await opened.store.read_log("a") == expected_log("a", 2)
    assert await opened.store.read_log("b") == expected_log("b", 3, finish=False)


async def test_interleaved_concurrent_runs_keep_their_own_order(opened: Opened) -> None:
    """Twelve runs written concurrently each read back whole and in their own order."""
    ids = [f"run-{i}" for i in range(12)]
    await asyncio.gather(*(write_run(opened.store, run_id, 6) for run_id in ids))
    for run_id in ids:
        assert await opened.store.read_log(run_id) == expected_log(run_id, 6)


async def test_second_run_started_is_refused_and_the_first_stands(opened: Opened) -> None:
    """A second RunStarted of a run is refused with RunAlreadyStartedError and the first one stays."""
    await opened.store.write_run_started(started("dup", attempt="first"))
    with pytest.raises(RunAlreadyStartedError, match="dup"):
        await opened.store.write_run_started(started("dup", attempt="second"))
    log = await opened.store.read_log("dup")
    assert log.started == started("dup", attempt="first")


async def test_second_run_finished_is_refused_and_the_first_stands(opened: Opened) -> None:
    """A second RunFinished of a run is refused with RunAlreadyStartedError and the first one stays."""
    await write_run(opened.store, "fin", 2)
    with pytest.raises(RunAlreadyStartedError, match="fin"):
        await opened.store.write_run_finished(finished("fin", 0))
    assert (await opened.store.read_log("fin")).finished == finished("fin", 2)


async def test_second_run_started_is_refused_after_reopening(opened: Opened) -> None:
    """A second RunStarted is refused by another store object on the same storage too."""
    await opened.store.write_run_started(started("again"))
    with pytest.raises(RunAlreadyStartedError):
        await opened.reopen().write_run_started(started("again"))


async def test_concurrent_starts_of_one_run_in_one_process_let_exactly_one_win(
    opened: Opened,
) -> None:
    """Eight concurrent RunStarted writes of one run: exactly one is stored, the others are refused."""
    attempts = [started("race", attempt=str(i)) for i in range(8)]
    outcomes = await asyncio.gather(
        *(opened.store.write_run_started(a) for a in attempts), return_exceptions=True
    )
    winners = [a for a, o in zip(attempts, outcomes, strict=True) if o is None]
    assert len(winners) == 1
    assert all(isinstance(o, RunAlreadyStartedError) for o in outcomes if o is not None)
    assert (await opened.store.read_log("race")).started == winners[0]


async def test_read_back_does_not_depend_on_the_callers_objects(opened: Opened) -> None:
    """Changing the mapping a record was built from changes neither what was stored nor what is
    read."""
    snapshot = {"model_client.kind": "scripted"}
    await opened.store.write_run_started(RunStarted("alias", snapshot))
    snapshot["model_client.kind"] = "changed"
    snapshot["new"] = "key"
    log = await opened.store.read_log("alias")
    assert log.started is not None
    assert dict(log.started.parameter_snapshot) == {"model_client.kind": "scripted"}
    assert await opened.store.read_log("alias") == log


async def test_hostile_run_ids_are_stored_apart_and_read_back(opened: Opened) -> None:
    """Path-like, empty, huge, non-ASCII, case-variant and NUL-holding run_ids each keep their own
    log."""
    for run_id in HOSTILE_RUN_IDS:
        await opened.store.write_run_started(started(run_id))
        await opened.store.write_step_completed(step_completed(run_id, 0, observation=run_id))
    for run_id in HOSTILE_RUN_IDS:
        log = await opened.store.read_log(run_id)
        assert log.started == started(run_id)
        assert log.steps == (step_completed(run_id, 0, observation=run_id),)


def test_parameters_are_synchronous_strings_naming_the_kind(opened: Opened) -> None:
    """parameters() is a mapping of strings to strings whose kind names the store."""
    parameters = opened.store.parameters()
    assert isinstance(parameters, Mapping)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in parameters.items())
    assert parameters["kind"] == opened.kind


async def test_text_of_every_kind_round_trips(opened: Opened) -> None:
    """Quotes, backslashes, control characters, NUL, emoji and bidi marks in text read back
    unchanged."""
    text = 'quote " backslash \\ newline \n tab \t nul \x00 emoji 🚀 rtl \u202e end'
    await opened.store.write_run_started(started("text", odd=text))
    await opened.store.write_step_completed(step_completed("text", 0, observation=text))
    log = await opened.store.read_log("text")
    assert log.started == started("text", odd=text)
    assert log.steps[0].step.observation == text


async def test_lone_surrogates_in_text_round_trip(opened: Opened) -> None:
    """Lone surrogates inside record text read back unchanged."""
    bad = "broken \ud800 text \udfff"
    await opened.store.write_run_started(started("sur", odd=bad))
    await opened.store.write_step_completed(step_completed("sur", 0, observation=bad))
    log = await opened.store.read_log("sur")
    assert log.started == started("sur", odd=bad)
    assert log.steps[0].step.observation == bad


async def test_a_run_id_with_a_lone_surrogate_is_refused_by_durable_stores(
    opened: Opened,
) -> None:
    """A durable store refuses a run_id with a lone surrogate (and reads no log for it) and keeps
    working; the memory store keeps it."""
    run_id = "id \ud800"
    if opened.kind == "memory":  # keys a dict, encodes nothing
        await opened.store.write_run_started(started(run_id))
        assert (await opened.store.read_log(run_id)).started == started(run_id)
        return
    with pytest.raises(PolyLoopError, match="ordinary characters"):
        await opened.store.write_run_started(started(run_id))
    assert await opened.store.read_log(run_id) == RunLog()
    assert await write_run(opened.store, "fine", 1) == await opened.store.read_log("fine")


@pytest.mark.parametrize("kind", STORE_KINDS)
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(run_ids=st.lists(st.text(max_size=40), min_size=1, max_size=6, unique=True))
def test_any_set_of_run_ids_stays_apart(kind: str, run_ids: list[str]) -> None:
    """For any set of distinct run_ids, each reads back its own RunStarted (and jsonl gives each a
    file of its own, even ignoring case)."""

    async def scenario(where: str) -> None:
        store = open_store(kind, where)
        try:
            for index, run_id in enumerate(run_ids):
                await store.write_run_started(started(run_id, index=str(index)))
            for index, run_id in enumerate(run_ids):
                log = await store.read_log(run_id)
                assert log == RunLog(started=started(run_id, index=str(index)))
        finally:
            await close_store(store)

    with tempfile.TemporaryDirectory() as where:
        asyncio.run(scenario(where))
        if kind == "jsonl":
            names = os.listdir(os.path.join(where, "runs"))
            assert len(names) == len(run_ids)
            assert len({n.lower() for n in names}) == len(run_ids)


async def test_list_run_ids_lists_every_run_with_a_record_once(opened: Opened) -> None:
    """Every store implements RunListing: each run with a record is listed once, whatever its
    id, and a run only read is not listed."""
    store = opened.store
    assert isinstance(store, RunListing)
    ids = ["b", "a", "../c", ""]
    for run_id in ids:
        await store.write_run_started(started(run_id))
    await write_run(store, "d", 1)
    await store.read_log("only-read")
    listed = await store.list_run_ids()
    assert sorted([*ids, "d"]) == sorted(listed)
    assert len(ids) + 1 == len(listed)


async def test_closing_waits_for_the_write_in_flight_and_twice_is_harmless(
    opened: Opened,
) -> None:
    """Every store implements StoreClosing: ``aclose`` returns once the write in flight is
    stored, and closing again (sync or async) does nothing."""
    store = opened.store
    assert isinstance(store, StoreClosing)
    pending = asyncio.ensure_future(store.write_run_started(started("last")))
    await asyncio.sleep(0)
    await store.aclose()
    await pending
    store.close()
    await store.aclose()
    reader = opened.reopen()
    assert RunLog(started=started("last")) == await reader.read_log("last")
