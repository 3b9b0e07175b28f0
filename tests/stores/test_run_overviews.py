"""Run overviews (design 0070): the SQLite and PostgreSQL stores answer pages of them from
indexes (:class:`polyloop.listing.RunOverviews`); the memory and jsonl stores have no such
capability and are listed by reading every log. On all four, a page equals what reading every
log gives, each run's line says what ``polyloop runs`` says of it, keyset paging visits every
run once, and the filters combine.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
import sqlite3
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql

from polyloop.asking import AskKind, UserAnswered, UserAsked, Verdict
from polyloop.errors import CorruptLogError
from polyloop.listing import (
    OVERVIEW_STATUSES,
    OverviewQuery,
    RunOverview,
    overview_of,
    select_overviews,
    select_pending,
    supports_run_overviews,
)
from polyloop.ports import RunListing, RunLog, RunStore
from polyloop.serialization import LogRecord
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import run_finished, run_started, tool_step, write_records
from polyloop.types import StopReason
from polyloop_cli.rendering.inspection import run_summary
from tests.stores._helpers import STORE_KINDS, Opened, close_store, open_store
from tests.stores._postgres import server_url

DIGEST = "a" * 64
TOOLS = ("lookup", "refund", "nul\x00tool", "工具")
TIMES = ("2026-12-01T00:00:00Z", "2026-12-01T00:00:01Z", "2026-12-02T10:00:00Z")
_EXAMPLE = itertools.count()


@dataclass(frozen=True, slots=True)
class Plan:
    """How one drawn run's log looks."""

    tools: tuple[str, ...]
    binding: tuple[tuple[str, str], ...]
    model: str
    started_at: str | None
    steps: int
    #: none, ask, ask_answered, question, finished, finished_wrongly, in_doubt, no_start
    ending: str
    asked_at: str


plans = st.builds(
    Plan,
    tools=st.lists(st.sampled_from(TOOLS), max_size=3, unique=True).map(tuple),
    binding=st.dictionaries(
        st.sampled_from(("team", "tier", "k=v")), st.sampled_from(("blue", "red", "")), max_size=2
    ).map(lambda d: tuple(sorted(d.items()))),
    model=st.sampled_from(("", "gpt-x", "m\x00")),
    started_at=st.none() | st.sampled_from(TIMES),
    steps=st.integers(0, 3),
    ending=st.sampled_from(
        (
            "none",
            "ask",
            "ask",
            "ask_answered",
            "question",
            "finished",
            "finished_wrongly",
            "in_doubt",
            "no_start",
        )
    ),
    asked_at=st.sampled_from(TIMES),
)


def records_of(run_id: str, plan: Plan) -> list[LogRecord]:
    """The records of a run as ``plan`` draws it (some of them logs that break the rules)."""
    tool = plan.tools[0] if plan.tools else "lookup"
    snapshot = {"model_client.kind": "scripted", "request.tools": json.dumps(list(plan.tools))}
    if plan.model:
        snapshot["model_client.model"] = plan.model
    for name in plan.tools:
        snapshot[f"request.tools.{name}.replay_policy"] = "safe"
        snapshot[f"request.tools.{name}.completes_run"] = "false"
        snapshot[f"request.tools.{name}.requires_approval"] = "true"
    for key, value in plan.binding:
        snapshot[f"request.model_binding.{key}"] = value
    records: list[LogRecord] = []
    if plan.ending != "no_start":
        records.append(run_started(run_id, snapshot, started_at=plan.started_at))
    steps = [tool_step(run_id, k, tool_name=tool) for k in range(plan.steps)]
    for step in steps:
        records.extend(step.records)
    k = plan.steps
    if plan.ending in ("ask", "ask_answered", "question"):
        # The step's reply, which holds the action asked about.
        asked = tool_step(run_id, k, tool_name=tool if plan.ending != "question" else "ask")
        records += [asked.model_intent, asked.model_result]
    if plan.ending in ("ask", "ask_answered"):
        records.append(
            UserAsked(
                run_id, k, AskKind.APPROVAL, f"CALL {tool} {{}}", tool, "{}", DIGEST, DIGEST,
                DIGEST, None, None, plan.asked_at,
            )
        )  # fmt: skip
    if plan.ending == "question":
        records.append(
            UserAsked(
                run_id, k, AskKind.QUESTION, "CALL ask {}", "ask", "{}", DIGEST, DIGEST, DIGEST,
                None, "Which one?", plan.asked_at,
            )
        )  # fmt: skip
    if plan.ending == "ask_answered":
        records.append(
            UserAnswered(run_id, k, Verdict.APPROVE, DIGEST, None, None, None, "ann", "t")
        )
    if plan.ending == "finished":
        records.append(run_finished(run_id, steps, StopReason.STEP_BUDGET))
    if plan.ending == "finished_wrongly":
        records.append(run_finished(run_id, steps, StopReason.TASK_COMPLETED))
    if plan.ending == "in_doubt":
        records.append(tool_step(run_id, k, tool_name=tool).model_intent)
    return records


async def read(store: RunStore, run_id: str) -> tuple[RunLog, str | None]:
    """The log as the console reads it: a log the store refuses is the run's damage."""
    try:
        return await store.read_log(run_id), None
    except CorruptLogError as error:
        return RunLog(), str(error)


async def by_reading(store: RunStore) -> list[RunOverview]:
    """Every run's overview from its log: what a store without the capability is listed by."""
    assert isinstance(store, RunListing)
    found = []
    for run_id in await store.list_run_ids():
        log, damage = await read(store, run_id)
        found.append(overview_of(run_id, log, damage))
    return found


async def page(store: RunStore, query: OverviewQuery) -> tuple[RunOverview, ...]:
    """A page as the console asks for it: from the store's indexes when it has them."""
    if supports_run_overviews(store):
        return await store.run_overviews(query)
    return select_overviews(await by_reading(store), query)


async def pending(
    store: RunStore, after: tuple[str, str] | None, limit: int
) -> tuple[RunOverview, ...]:
    if supports_run_overviews(store):
        return await store.pending_asks(after, limit)
    return select_pending(await by_reading(store), after, limit)


async def every_page(store: RunStore, query: OverviewQuery) -> list[RunOverview]:
    """Every page of ``query`` (which must start at the beginning), by keyset."""
    seen: list[RunOverview] = []
    after = query.after
    while True:
        got = await page(
            store,
            OverviewQuery(
                status=query.status,
                tool=query.tool,
                binding=query.binding,
                run_id_contains=query.run_id_contains,
                after=after,
                limit=query.limit,
            ),
        )
        assert len(got) <= query.limit
        seen.extend(got)
        if len(got) < query.limit:
            return seen
        after = got[-1].run_id


def agrees_with_polyloop_runs(overview: RunOverview, log: RunLog, damage: str | None) -> None:
    row = run_summary(overview.run_id, log, damage)
    ask = row["pending_ask"]
    assert (
        row["status"],
        row["run_status"],
        row["stop_reason"],
        row["steps"],
        row["model"],
        row["tail"],
        row["started_at"],
        None if ask is None else (ask["step"], ask["kind"], ask["tool_name"], ask["asked_at"]),
    ) == (
        overview.status,
        overview.run_status,
        overview.stop_reason,
        overview.steps,
        overview.model,
        overview.tail,
        overview.started_at,
        None
        if overview.ask_step is None
        else (overview.ask_step, overview.ask_kind, overview.ask_tool, overview.asked_at),
    )


async def check_store(store: RunStore, prefix: str, written: dict[str, Plan]) -> None:
    """Every claim of the module on the runs whose id starts with ``prefix``."""
    mine = [each for each in await by_reading(store) if each.run_id.startswith(prefix)]
    assert sorted(each.run_id for each in mine) == sorted(written)
    for each in mine:
        log, damage = await read(store, each.run_id)
        agrees_with_polyloop_runs(each, log, damage)
    # Paging visits every run once, in order, whatever the page size.
    for limit in (1, 2, 50):
        walked = await every_page(store, OverviewQuery(run_id_contains=prefix, limit=limit))
        assert walked == sorted(mine, key=lambda each: each.run_id)
    # Every filter, alone and combined, gives what reading every log gives.
    queries = [OverviewQuery(run_id_contains=prefix, status=word) for word in OVERVIEW_STATUSES]
    queries += [OverviewQuery(run_id_contains=prefix, tool=tool) for tool in TOOLS]
    queries += [
        OverviewQuery(run_id_contains=prefix, binding=pair)
        for pair in (("team", "blue"), ("k=v", ""), ("tier", "red"))
    ]
    queries += [
        OverviewQuery(
            run_id_contains=prefix,
            status="waiting_approval",
            tool="lookup",
            binding=("team", "red"),
        ),
        OverviewQuery(run_id_contains=prefix, status="unfinished", tool="工具", limit=1),
        OverviewQuery(run_id_contains=prefix + "-1", status="corrupt", after=prefix + "-0"),
    ]
    for query in queries:
        whole = replace(query, limit=10_000)
        assert await every_page(store, query) == list(select_overviews(mine, whole))


async def write_plans(store: RunStore, prefix: str, drawn: Sequence[Plan]) -> dict[str, Plan]:
    written = {}
    for index, plan in enumerate(drawn):
        run_id = f"{prefix}-{index}"
        records = records_of(run_id, plan)
        await write_records(store, records)
        if records:  # a run without a record is no run
            written[run_id] = plan
    return written


@pytest.mark.slow
@pytest.mark.parametrize("kind", STORE_KINDS)
@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=st.lists(plans, min_size=1, max_size=7))
def test_pages_of_overviews_agree_with_reading_every_log(kind: str, drawn: list[Plan]) -> None:
    """For any drawn logs (finished, parked, decided, in doubt, breaking the rules), each
    run's line says what ``polyloop runs`` says, paging visits each once, and every filter
    (alone and combined) gives what reading every log gives; pages taken between writes too."""

    async def scenario(where: str) -> None:
        store = open_store(kind, where)
        try:
            prefix = f"x{next(_EXAMPLE)}"
            half = len(drawn) // 2
            # A page between writes: later writes are seen (the stale marks of design 0070).
            first = await write_plans(store, prefix, drawn[:half])
            await check_store(store, prefix, first)
            second = await write_plans(store, prefix + "b", drawn[half:])
            await check_store(store, prefix, {**first, **second})
        finally:
            await close_store(store)

    with tempfile.TemporaryDirectory() as where:
        asyncio.run(scenario(where))


async def test_the_pending_asks_page_oldest_first_with_a_count(opened: Opened) -> None:
    """The pending asks come oldest first (then by run id), page by their key and are counted;
    a decision takes a run off the list on the next page."""
    store = opened.store
    plan = Plan(("lookup",), (), "m", None, 0, "ask", TIMES[0])
    expected = []
    for index in range(7):
        asked_at = TIMES[index % 3]
        run_id = f"wait-{(index * 5) % 7}"
        await write_records(store, records_of(run_id, replace(plan, asked_at=asked_at)))
        expected.append((asked_at, run_id))
    await write_records(store, records_of("done", Plan(("lookup",), (), "", None, 1, "none", "")))
    expected.sort()
    walked: list[tuple[str, str]] = []
    after = None
    while True:
        got = await pending(store, after, 3)
        walked += [(each.asked_at or "", each.run_id) for each in got]
        if len(got) < 3:
            break
        after = walked[-1]
    assert expected == walked
    if supports_run_overviews(store):
        assert 7 == await store.count_pending_asks()
    decided = expected[0][1]
    await write_records(
        store, [UserAnswered(decided, 0, Verdict.REJECT, DIGEST, None, "no", None, "ann", "t")]
    )
    again = await pending(store, None, 50)
    assert [run_id for _, run_id in expected[1:]] == [each.run_id for each in again]
    if supports_run_overviews(store):
        assert 6 == await store.count_pending_asks()
    # A second store object on the same storage sees the same (the marks live in the storage).
    other = opened.reopen()
    assert again == await pending(other, None, 50)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_the_server_stores_answer_from_indexes(kind: str, tmp_path: object) -> None:
    """SQLite and PostgreSQL have the capability; a store never written answers empty pages
    (and creates nothing); a write by another store object is seen by the next page."""
    store = open_store(kind, str(tmp_path))
    other = open_store(kind, str(tmp_path))
    try:
        assert supports_run_overviews(store)
        assert () == await store.run_overviews(OverviewQuery())
        assert 0 == await store.count_pending_asks()
        await write_records(other, records_of("r", Plan((), (), "", None, 0, "ask", TIMES[0])))
        assert ["r"] == [each.run_id for each in await store.pending_asks()]
        await write_records(
            other, [UserAnswered("r", 0, Verdict.APPROVE, DIGEST, None, None, None, "a", "t")]
        )
        assert [] == list(await store.pending_asks())
        assert ["unfinished"] == [
            each.status for each in await store.run_overviews(OverviewQuery())
        ]
    finally:
        await close_store(store)
        await close_store(other)


def test_memory_and_jsonl_stores_have_no_such_capability(tmp_path: object) -> None:
    """They are listed by reading every log (fine for what they hold)."""
    for kind in ("memory", "jsonl"):
        assert not supports_run_overviews(open_store(kind, str(tmp_path)))


OLD_FILE = Path(__file__).parent / "fixtures" / "before-0070" / "runs.sqlite"
#: The runs of ``OLD_FILE`` and their status. The file was written by the SQLite store of
#: commit cac3482 (before design 0070: no overview tables, no trigger), from
#: ``records_of(run_id, plan)`` of these plans.
OLD_RUNS = {
    "old-finished": "finished",
    "old-waiting": "waiting_approval",
    "old-question": "waiting_approval",
    "old-decided": "unfinished",
    "old-in-doubt": "unfinished",
    "old-corrupt": "corrupt",
}


async def test_a_sqlite_file_written_before_overviews_opens_and_lists_right(
    tmp_path: Path,
) -> None:
    """An existing file gets its tables on the first page, every run in it is listed as
    ``polyloop runs`` says, and writes after that keep the overviews right."""
    path = tmp_path / "runs.sqlite"
    shutil.copyfile(OLD_FILE, path)
    async with SqliteRunStore(path) as store:
        listed = await store.run_overviews(OverviewQuery())
        assert OLD_RUNS == {each.run_id: each.status for each in listed}
        assert sorted(OLD_RUNS) == [each.run_id for each in listed]
        for each in listed:
            log, damage = await read(store, each.run_id)
            agrees_with_polyloop_runs(each, log, damage)
        assert ["old-waiting"] == [
            each.run_id
            for each in await store.run_overviews(
                OverviewQuery(status="waiting_approval", binding=("team", "red"))
            )
        ]
        assert ["old-question", "old-waiting"] == [
            each.run_id for each in await store.pending_asks()
        ]
        await write_records(
            store,
            [UserAnswered("old-waiting", 0, Verdict.APPROVE, DIGEST, None, None, None, "a", "t")],
        )
        assert ["old-question"] == [each.run_id for each in await store.pending_asks()]
        assert 1 == await store.count_pending_asks()
    # Opened again: the tables are there and nothing is summarized twice.
    async with SqliteRunStore(path) as again:
        assert listed[0] == (await again.run_overviews(OverviewQuery(limit=1)))[0]
        with sqlite3.connect(path) as connection:
            stale = connection.execute("SELECT COUNT(*) FROM run_overviews_stale").fetchone()
        assert (0,) == stale


@pytest.mark.server
async def test_a_postgres_schema_written_before_overviews_lists_right(tmp_path: Path) -> None:
    """A schema whose runs were written before the overview tables existed gets them on the
    first page, with every run in it. Such a schema is made here by writing runs, then
    dropping what design 0070 adds (the tables, the trigger and its function): what is left
    is exactly the layout of the store before it."""
    store = open_store("postgres", str(tmp_path))
    try:
        assert isinstance(store, PostgresRunStore)
        await store.open()
        expected = {}
        for index, ending in enumerate(("finished", "ask", "none", "finished_wrongly")):
            run_id = f"before-{index}"
            await write_records(
                store, records_of(run_id, Plan(("lookup",), (), "m", None, 0, ending, TIMES[0]))
            )
            expected[run_id] = overview_of(run_id, *await read(store, run_id))
        assert sorted(expected) == [
            each.run_id for each in await store.run_overviews(OverviewQuery())
        ]
        with psycopg.connect(server_url(), autocommit=True) as connection:
            schema = sql.Identifier(store.schema)
            connection.execute(
                sql.SQL("DROP TRIGGER run_overviews_mark ON {}.run_records").format(schema)
            )
            connection.execute(sql.SQL("DROP FUNCTION {}.run_overviews_mark()").format(schema))
            for table in ("run_overviews", "run_overview_tools", "run_overview_bindings"):
                connection.execute(
                    sql.SQL("DROP TABLE {}").format(sql.Identifier(store.schema, table))
                )
            connection.execute(
                sql.SQL("DROP TABLE {}").format(sql.Identifier(store.schema, "run_overviews_stale"))
            )
        later = records_of("before-4", Plan((), (), "", None, 0, "ask", TIMES[1]))
        await write_records(store, later)
        expected["before-4"] = overview_of("before-4", *await read(store, "before-4"))
        other = open_store("postgres", str(tmp_path))
        assert isinstance(other, PostgresRunStore)
        try:
            assert list(expected.values()) == list(await other.run_overviews(OverviewQuery()))
            assert ["before-1", "before-4"] == [each.run_id for each in await other.pending_asks()]
        finally:
            await close_store(other)
    finally:
        await close_store(store)


@pytest.mark.race
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_pages_taken_while_runs_are_written_end_right(kind: str, tmp_path: Path) -> None:
    """Two store objects page (and so remake overviews) again and again while a third writes
    runs record by record: whatever the interleaving, once the writes stop the next page of
    each is what reading every log gives (no overview is left behind a write, and none made
    from an older read replaces a newer one)."""
    writer = open_store(kind, str(tmp_path))
    readers = [open_store(kind, str(tmp_path)) for _ in range(2)]
    done = asyncio.Event()
    pages_taken = [0, 0]

    async def write() -> None:
        plans = [
            Plan(("lookup",), (("team", "red"),), "m", None, 0, ending, TIMES[index % 3])
            for index, ending in enumerate(("ask", "none", "finished", "ask_answered") * 6)
        ]
        for index, plan in enumerate(plans):
            for record in records_of(f"busy-{index:02d}", plan):
                await write_records(writer, [record])
        done.set()

    async def page_forever(number: int) -> None:
        store = readers[number]
        assert supports_run_overviews(store)
        while not done.is_set() or pages_taken[number] == 0:
            await store.run_overviews(OverviewQuery(status="waiting_approval"))
            await store.pending_asks()
            pages_taken[number] += 1

    try:
        await asyncio.gather(write(), page_forever(0), page_forever(1))
        expected = sorted(await by_reading(writer), key=lambda each: each.run_id)
        assert 24 == len(expected)
        for store in readers:
            assert expected == await every_page(store, OverviewQuery(limit=7))
            assert select_pending(expected, None, 50) == await pending(store, None, 50)
    finally:
        for store in [writer, *readers]:
            await close_store(store)
