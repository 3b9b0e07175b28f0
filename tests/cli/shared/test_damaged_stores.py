"""Physically damaged stores: the readable runs are listed, the damaged ones flagged (exit 6);
exit 7 only when nothing can be read; `show` of a damaged run shows what can still be read.

The damage is real: bytes overwritten in the middle of a closed SQLite file, a line of a JSON
Lines run file replaced. What counts as damaged is what the store itself cannot read.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StopReason
from tests.cli._kit import (
    assert_one_line_error,
    finished,
    headline,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)

RUNS = [f"run-{index:02d}" for index in range(40)]
STEPS = 5


async def fill(store: SqliteRunStore | JsonlRunStore) -> None:
    for run_id in RUNS:
        records: list[object] = [started(run_id)]
        for k in range(STEPS):
            records += tool_step_records(run_id, k, "lookup", ReplayPolicy.SAFE)
        steps = [tool_step(k, "lookup") for k in range(STEPS)]
        records.append(finished(run_id, StopReason.STEP_BUDGET, steps))
        await write(store, records)  # type: ignore[arg-type]


def overwrite(path: Path, offset: int, data: bytes) -> None:
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def replace_line(path: Path, index: int, line: bytes) -> None:
    lines = path.read_bytes().splitlines(keepends=True)
    lines[index] = line
    path.write_bytes(b"".join(lines))


def prepend(path: Path, data: bytes) -> None:
    path.write_bytes(data + path.read_bytes())


def short(result_headline: str, *paths: Path) -> str:
    """The headline with each path written as ``P``: the limit is on the words around them."""
    for path in paths:
        result_headline = result_headline.replace(str(path), "P")
    return result_headline


async def filled_jsonl(directory: Path, run_id: str) -> Path:
    """A JSON Lines store of the 40 runs; returns the file of ``run_id``."""
    async with JsonlRunStore(directory) as store:
        await fill(store)
        return Path(store.path_for(run_id))


async def unreadable_by_the_store(path: Path) -> set[str]:
    """The runs whose log the SQLite store itself refuses to read."""
    bad = set()
    async with SqliteRunStore(path) as store:
        for run_id in RUNS:
            try:
                await store.read_log(run_id)
            except Exception:
                bad.add(run_id)
    return bad


@pytest.fixture
async def damaged_sqlite(tmp_path: Path) -> tuple[str, set[str]]:
    """A closed store of 40 runs with 2,000 bytes overwritten in the middle of the file, on the
    table's own rows (not an index page, whose damage would leave every row readable)."""
    path = tmp_path / "runs.sqlite"
    async with SqliteRunStore(path) as store:
        await fill(store)
    middle_run = RUNS[len(RUNS) // 2]
    row = path.read_bytes().find(f'{{"type":"intent","record":{{"run_id":"{middle_run}"'.encode())
    assert row > 0, "the rows of the middle run are in the file"
    overwrite(path, row, b"\xde\xad\xbe\xef" * 500)
    bad = await unreadable_by_the_store(path)
    assert 0 < len(bad) < len(RUNS), "the damage should hit some runs, not all"
    return f"sqlite://{path}", bad


def test_runs_lists_the_readable_runs_and_flags_the_damaged_ones(
    damaged_sqlite: tuple[str, set[str]], env: dict[str, str]
) -> None:
    """`runs` goes on past a damaged run: every run listed, exactly the damaged ones CORRUPT."""
    url, bad = damaged_sqlite
    result = polyloop("runs", "--store", url, "--json", env=env)
    assert 6 == result.code, result.stderr
    statuses = {row["run_id"]: row["status"] for row in result.json()["runs"]}
    assert {run_id: "corrupt" if run_id in bad else "finished" for run_id in RUNS} == statuses
    text = polyloop("runs", "--store", url, env=env)
    assert_one_line_error(text, 6)
    assert len(short(headline(text), Path(url.removeprefix("sqlite://")))) <= 200
    assert f"{len(bad)} of {len(RUNS)} runs are corrupt or damaged" in text.stderr


def test_verify_all_checks_every_run_past_the_damaged_ones(
    damaged_sqlite: tuple[str, set[str]], env: dict[str, str]
) -> None:
    """`verify --all` verifies every run; only the damaged ones fail; exit 6, one line."""
    url, bad = damaged_sqlite
    result = polyloop("verify", "--all", "--store", url, "--json", env=env)
    assert 6 == result.code
    verdicts = {run["run_id"]: run["ok"] for run in result.json()["runs"]}
    assert {run_id: run_id not in bad for run_id in RUNS} == verdicts
    text = polyloop("verify", "--all", "--store", url, env=env)
    assert_one_line_error(text, 6)
    assert len(short(headline(text), Path(url.removeprefix("sqlite://")))) <= 200
    assert ".;" not in text.stderr


def test_show_of_a_damaged_run_shows_what_can_be_read(
    damaged_sqlite: tuple[str, set[str]], env: dict[str, str]
) -> None:
    """`show` of a damaged run prints its readable steps and the unreadable rows, then exit 6."""
    url, bad = damaged_sqlite
    run_id = RUNS[len(RUNS) // 2]  # the overwritten rows begin among this run's records
    assert run_id in bad
    document = polyloop("show", run_id, "--store", url, "--json", env=env)
    assert 6 == document.code
    shown = document.json()
    assert "corrupt" == shown["status"]
    assert shown["unreadable_records"], "the damaged rows are named"
    assert all(", row seq=" in problem for problem in shown["unreadable_records"])
    assert {row["step"] for row in shown["steps"]} <= set(range(STEPS))
    text = polyloop("show", run_id, "--store", url, env=env)
    assert_one_line_error(text, 6)
    assert headline(text).startswith(f"the log of run {run_id!r} is damaged")
    assert "unreadable record:" in text.stdout
    assert text.stdout.splitlines()[-1].startswith(f"Totals: {len(shown['steps'])} steps")


@pytest.mark.parametrize("command", ["plan", "export"])
def test_plan_and_export_refuse_a_damaged_run_in_one_line(
    damaged_sqlite: tuple[str, set[str]], env: dict[str, str], command: str
) -> None:
    """`plan` and `export` refuse a damaged log with exit 6 and point at `show`."""
    url, bad = damaged_sqlite
    result = polyloop(command, sorted(bad)[0], "--store", url, env=env)
    assert_one_line_error(result, 6)
    assert "show" in headline(result)
    assert len(short(headline(result), Path(url.removeprefix("sqlite://")))) <= 200


def test_a_store_whose_schema_page_is_damaged_is_exit_7(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """When nothing can be read (the page holding the schema is overwritten) `runs` is exit 7."""
    path = tmp_path / "runs.sqlite"

    async def make() -> None:
        async with SqliteRunStore(path) as store:
            await fill(store)

    asyncio.run(make())
    overwrite(path, 100, b"\xff" * 3900)  # after the file header: the first page's b-tree
    result = polyloop("runs", "--store", f"sqlite://{path}", env=env)
    assert_one_line_error(result, 7)
    assert headline(result).startswith(f"cannot read the sqlite store at {path}")
    assert len(short(headline(result), path)) <= 200


async def test_a_jsonl_run_with_a_bad_line_is_shown_up_to_and_past_it(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A replaced middle line: the run is flagged, `show` gives every other record's steps."""
    path = await filled_jsonl(tmp_path / "runs", "run-03")
    replace_line(path, 8, b'{"not": "a record"}\n')  # line 9: the StepCompleted of step 1
    url = f"jsonl://{tmp_path / 'runs'}"
    listed = polyloop("runs", "--store", url, "--json", env=env)
    assert 6 == listed.code
    statuses = {row["run_id"]: row["status"] for row in listed.json()["runs"]}
    assert {run_id: "corrupt" if run_id == "run-03" else "finished" for run_id in RUNS} == statuses
    shown = polyloop("show", "run-03", "--store", url, "--json", env=env)
    assert 6 == shown.code
    assert [0, 2, 3, 4] == [row["step"] for row in shown.json()["steps"]]
    assert [f"{path}, line 9"] == [
        problem.split(": ")[0] for problem in shown.json()["unreadable_records"]
    ]


async def test_a_jsonl_file_whose_first_line_is_garbage_does_not_hide_the_other_runs(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The store's own listing fails on such a file; the CLI lists the rest and names it."""
    path = await filled_jsonl(tmp_path / "runs", "run-07")
    prepend(path, b"garbage\n")
    result = polyloop("runs", "--store", f"jsonl://{tmp_path / 'runs'}", "--json", env=env)
    assert 6 == result.code
    document = result.json()
    assert [run_id for run_id in RUNS if run_id != "run-07"] == sorted(
        row["run_id"] for row in document["runs"]
    )
    assert [path.name] == [problem.split(",")[0] for problem in document["unreadable"]]


async def test_a_sqlite_body_that_is_not_utf8_is_a_corrupt_run_and_the_others_go_on(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """One row of invalid UTF-8: verify of that run exits 6 naming its seq; runs and
    verify --all flag it and verify every other run (issue 15, item 4)."""
    path = tmp_path / "runs.sqlite"
    async with SqliteRunStore(path) as store:
        await fill(store)
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        (seq,) = connection.execute(
            "SELECT min(seq) FROM run_records WHERE run_id = 'run-05' AND kind = 'intent'"
        ).fetchone()
        connection.execute(
            "UPDATE run_records SET body = CAST(X'7bff7d' AS TEXT) WHERE seq = ?", (seq,)
        )
    finally:
        connection.close()
    url = f"sqlite://{path}"
    one = polyloop("verify", "run-05", "--store", url, env=env)
    assert_one_line_error(one, 6)
    assert f"run_records seq {seq}: not a valid log record of run 'run-05'" in one.stderr
    every = polyloop("verify", "--all", "--store", url, "--json", env=env)
    assert 6 == every.code
    assert {run_id: run_id != "run-05" for run_id in RUNS} == {
        run["run_id"]: run["ok"] for run in every.json()["runs"]
    }
    listed = polyloop("runs", "--store", url, "--json", env=env)
    assert 6 == listed.code
    assert {run_id: "corrupt" if run_id == "run-05" else "finished" for run_id in RUNS} == {
        row["run_id"]: row["status"] for row in listed.json()["runs"]
    }


async def test_a_jsonl_last_line_of_another_schema_version_is_corrupt_not_torn(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The last line of a finished run edited to schema_version 2 is refused by verify
    (exit 6, naming the line) instead of being taken for a torn write (issue 15, item 1)."""
    path = await filled_jsonl(tmp_path / "runs", "run-02")
    lines = path.read_bytes().splitlines(keepends=True)
    replace_line(path, len(lines) - 1, lines[-1].replace(b'_version":1', b'_version":2'))
    result = polyloop("verify", "run-02", "--store", f"jsonl://{tmp_path / 'runs'}", env=env)
    assert_one_line_error(result, 6)
    assert f"{path}, line {len(lines)}: not a valid log record" in result.stderr
