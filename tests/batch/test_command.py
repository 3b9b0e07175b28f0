"""``polyloop batch`` as a user runs it: real processes, a real SQLite store, real signals."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.parse
from pathlib import Path

import pytest

from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from tests.batch._kit import (
    FACTORY,
    ROOT,
    assert_batch_error,
    batch_args,
    batch_env,
    episodes_of,
    finish,
    python,
    read_logs,
    results,
    start_batch,
    write_episodes,
)
from tests.cli._kit import (
    Completed,
    assert_one_line_error,
    headline,
    pasted,
    polyloop,
    polyloop_on_terminal,
    users_shell,
)
from tests.stores._agent import ledger_effects as read_lines
from tests.stores._postgres import USED_SCHEMAS, schema_for, server_url


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return batch_env(tmp_path / "home")


def _wait_for(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        (['{"run_id": "a"}', "not json at all", '{"run_id": "c"}'], 2),
        (['{"run_id": "a"}', '{"task": "no id"}'], 2),
        (['{"run_id": ["a"]}'], 1),
        (['{"run_id": "a"}', '{"run_id": "b"}', '{"run_id": "a"}'], 3),
    ],
    ids=["not-json", "missing-run-id", "non-string-run-id", "duplicate-run-id"],
)
def test_a_bad_episodes_file_is_one_error_naming_the_line_and_nothing_starts(
    tmp_path: Path, env: dict[str, str], lines: list[str], line: int
) -> None:
    """Exit 21 with one line naming the file's line; no store is created, no factory called."""
    episodes = tmp_path / "eps.jsonl"
    opens = tmp_path / "opens"
    episodes.write_text(
        "\n".join(
            text.replace('"}', f'", "opens": "{opens}"}}') if text.endswith('"}') else text
            for text in lines
        )
        + "\n"
    )
    result = polyloop(*batch_args(episodes, tmp_path / "runs.sqlite"), env=env, cwd=tmp_path)
    assert_one_line_error(result, 21)
    assert f"{episodes}, line {line}" in headline(result)
    assert (False, False, False) == (
        (tmp_path / "runs.sqlite").exists(),
        opens.exists(),
        (tmp_path / "eps-results.jsonl").exists(),
    )


@pytest.mark.parametrize(
    ("agent", "words"),
    [
        ("tests.batch._agents", "is not of the form module:factory"),
        ("tests.batch.no_such_module:factory", "cannot import module 'tests.batch.no_such_module'"),
        ("tests.batch._agents:nothing_here", "has no attribute 'nothing_here'"),
        ("tests.batch._agents:NOT_A_FACTORY", "names a int, not a callable"),
    ],
)
def test_a_factory_that_cannot_be_loaded_is_one_error(
    tmp_path: Path, env: dict[str, str], agent: str, words: str
) -> None:
    """A bad --agent is exit 22, one line saying what failed; nothing starts."""
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(2))
    args = batch_args(episodes, tmp_path / "runs.sqlite")
    args[args.index(FACTORY)] = agent
    result = polyloop(*args, env=env, cwd=tmp_path)
    assert_one_line_error(result, 22)
    assert words in headline(result)
    assert not (tmp_path / "runs.sqlite").exists()


def test_a_failing_episode_is_reported_and_the_exit_status_says_so(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A factory that raises fails its episode; the others run; the summary names the error;
    exit 20 with one line that tells how to rerun, pasteable."""
    rows = episodes_of(3)
    rows[1]["factory"] = "raises"
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    result = polyloop(*batch_args(episodes, tmp_path / "runs.sqlite"), env=env, cwd=tmp_path)
    error = assert_batch_error(result, 20)
    assert '"ep-0001": RuntimeError: the factory cannot build ep-0001' in result.stdout
    assert "ran 2  resumed 0  recorded 0  error 1" in result.stdout
    statuses = {
        run_id: line["status"] for run_id, line in results(tmp_path / "eps-results.jsonl").items()
    }
    assert {"ep-0000": "ran", "ep-0001": "error", "ep-0002": "ran"} == statuses
    rerun = error.split("continue: ", 1)[1]
    again = polyloop(*rerun.split()[1:], env=env, cwd=tmp_path)
    assert 20 == again.code
    statuses = {
        run_id: line["status"] for run_id, line in results(tmp_path / "eps-results.jsonl").items()
    }
    assert {"ep-0000": "recorded", "ep-0001": "error", "ep-0002": "recorded"} == statuses


@pytest.mark.server
def test_a_postgresql_store_url_drives_the_batch_and_never_prints_its_password(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """--store postgresql://… runs every episode on the server; the rerun counts them recorded;
    the URL's password appears in no output and no results line."""
    url = server_url()
    password = urllib.parse.urlsplit(url).password
    assert password, "the test server's URL must carry a password for this test to look for"
    schema = schema_for(str(tmp_path))
    USED_SCHEMAS.add(schema)
    store_url = f"{url}?schema={schema}"
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(6, steps=2))
    args = ["batch", str(episodes), "--agent", FACTORY, "--store", store_url, "--concurrency", "3"]
    first = polyloop(*args, env=env, cwd=tmp_path)
    again = polyloop(*args, env=env, cwd=tmp_path)
    assert (0, 0) == (first.code, again.code), first.stderr + again.stderr
    statuses = {line["status"] for line in results(tmp_path / "eps-results.jsonl").values()}
    assert {"recorded"} == statuses
    written = (tmp_path / "eps-results.jsonl").read_text(encoding="utf-8")
    assert [] == [
        text
        for text in (first.stdout, first.stderr, again.stdout, again.stderr, written)
        if password in text
    ]

    async def finished() -> set[str]:
        async with PostgresRunStore(url, schema=schema) as store:
            logs = [await store.read_log(f"ep-{index:04d}") for index in range(6)]
        return {log.finished.result.stop_reason.value for log in logs if log.finished}

    assert {"agent_finished"} == asyncio.run(finished())


def test_the_json_summary_is_one_document(tmp_path: Path, env: dict[str, str]) -> None:
    """--json prints the summary as JSON on stdout and no progress lines on stderr."""
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(4, steps=1))
    result = polyloop(
        *batch_args(episodes, tmp_path / "runs.sqlite", "--json"), env=env, cwd=tmp_path
    )
    assert (0, "") == (result.code, result.stderr)
    document = result.json()
    assert {
        "total": 4,
        "done": 4,
        "by_stop_reason": {"agent_finished": 4},
        "error_count": 0,
        "skipped_count": 0,
        "not_launched": 0,
        "steps": 8,
        "complete": True,
        "results_file": str(tmp_path / "eps-results.jsonl"),
    } == {
        key: document[key]
        for key in (
            "total",
            "done",
            "by_stop_reason",
            "error_count",
            "skipped_count",
            "not_launched",
            "steps",
            "complete",
            "results_file",
        )
    }


def test_piped_progress_is_plain_lines_and_a_terminal_gets_a_live_display(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Piped: plain progress lines on stderr, no escape codes; on a terminal: the live display
    with done/total, steps/s and ETA."""
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(20, steps=1))
    piped = polyloop(*batch_args(episodes, tmp_path / "a.sqlite"), env=env, cwd=tmp_path)
    lines = piped.stderr.splitlines()
    assert (0, 20, True) == (piped.code, len(lines), "\x1b[" not in piped.stderr + piped.stdout)
    assert lines[-1].startswith("polyloop batch: 20/20 done; agent_finished 20; ")
    screen = polyloop_on_terminal(
        *batch_args(episodes, tmp_path / "b.sqlite"), env=env, cwd=tmp_path
    )
    assert 0 == screen.code
    assert ("20/20", True, True) == (
        "20/20" if "20/20" in screen.stdout else screen.stdout,
        "steps/s" in screen.stdout,
        "ETA" in screen.stdout,
    )


def test_a_run_held_by_another_process_is_skipped_and_the_exit_status_is_not_zero(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """While this test process holds one run's lease, the batch skips that episode (after
    trying again) and exits 20; the next batch, with the lease free, drives it."""
    store_path = tmp_path / "runs.sqlite"
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(3, model_sleep=0.2))

    async def held() -> None:
        async with SqliteRunStore(store_path) as store:
            lease = await store.acquire_run_lease("ep-0001")
            try:
                result = await asyncio.to_thread(
                    polyloop, *batch_args(episodes, store_path), env=env, cwd=tmp_path
                )
            finally:
                await lease.release()
        error = assert_batch_error(result, 20)
        assert error.startswith("1 episode was skipped (another driver held it)")
        assert 'Skipped, another driver held the run (1): "ep-0001"' in result.stdout

    asyncio.run(held())
    line = results(tmp_path / "eps-results.jsonl")["ep-0001"]
    assert ("skipped", True) == (line["status"], line["attempts"] >= 2)
    assert f"process {os.getpid()}" in line["error"]
    again = polyloop(*batch_args(episodes, store_path), env=env, cwd=tmp_path)
    assert 0 == again.code
    assert "ran" == results(tmp_path / "eps-results.jsonl")["ep-0001"]["status"]


def test_importing_the_command_does_not_import_ray(env: dict[str, str]) -> None:
    """`import polyloop_cli.main` (and the batch command) leaves Ray unimported."""
    code = "import sys, polyloop_cli.main, polyloop_cli.commands.batch, polyloop.batch; print('ray' in sys.modules)"
    assert "False" == python(code, env)


@pytest.mark.crash
@pytest.mark.slow
def test_a_batch_killed_with_sigkill_and_rerun_finishes_every_episode_exactly_once(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """SIGKILL mid-batch, then the same command: every episode finishes once, and each `never`
    action (pay) ran at most once per run and step, by the fsynced ledger."""
    ledger = tmp_path / "ledger"
    rows = episodes_of(24, steps=4, model_sleep=0.03, ledger=str(ledger))
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    store_path = tmp_path / "runs.sqlite"
    args = batch_args(episodes, store_path, concurrency=6)
    process = start_batch(args, env, tmp_path)
    _wait_for(lambda: len(read_lines(str(ledger))) >= 20, "side effects of the first batch")
    process.send_signal(signal.SIGKILL)
    finish(process, timeout=30)
    before = read_lines(str(ledger))
    logs = read_logs(store_path, [row["run_id"] for row in rows])
    unfinished = [run_id for run_id, log in logs.items() if log.finished is None]
    assert unfinished, "the kill came after the whole batch had finished"
    rerun = finish(start_batch(args, env, tmp_path))
    assert 0 == rerun.code, rerun.stderr
    lines = results(tmp_path / "eps-results.jsonl")
    assert {row["run_id"] for row in rows} == set(lines)
    assert set() == {
        run_id
        for run_id, line in lines.items()
        if line["status"] not in ("ran", "resumed", "recorded")
    }
    assert any(line["status"] == "resumed" for line in lines.values())
    logs = read_logs(store_path, [row["run_id"] for row in rows])
    assert set() == {run_id for run_id, log in logs.items() if log.finished is None}
    effects = read_lines(str(ledger))
    pays = [(e["run_id"], e["n"]) for e in effects if e["tool"] == "pay"]
    assert sorted(set(pays)) == sorted(pays), "a never action ran twice"
    assert len(before) <= len(effects)
    stops = {log.finished.result.stop_reason.value for log in logs.values() if log.finished}
    assert stops <= {"agent_finished", "resume_state_unknown"}


@pytest.mark.slow
def test_a_first_ctrl_c_lets_episodes_in_flight_finish_and_the_rerun_continues(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """SIGINT once: no new episode starts, those in flight finish (not cancelled), the summary
    is printed, exit 130; the same command then runs exactly the rest."""
    opens = tmp_path / "opens"
    rows = episodes_of(12, steps=2, model_sleep=0.3, opens=str(opens))
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    args = batch_args(episodes, tmp_path / "runs.sqlite", concurrency=3)
    process = start_batch(args, env, tmp_path)
    _wait_for(lambda: len(read_lines(str(opens))) >= 3, "three episodes in flight")
    process.send_signal(signal.SIGINT)
    first = finish(process)
    assert 130 == first.code, first.stderr
    assert "stopping: no new episodes" in first.stderr
    assert "not started (the batch was stopped): 9" in first.stdout
    lines = results(tmp_path / "eps-results.jsonl")
    assert (["ran"] * 3, {"returned"}) == (
        [line["status"] for line in lines.values()],
        {e["how"] for e in read_lines(str(opens)) if e["event"] == "close"},
    )
    again = finish(start_batch(args, env, tmp_path))
    assert 0 == again.code, again.stderr
    statuses = [line["status"] for line in results(tmp_path / "eps-results.jsonl").values()]
    assert (3, 9) == (statuses.count("recorded"), statuses.count("ran"))


@pytest.mark.slow
def test_a_second_ctrl_c_cancels_episodes_in_flight_and_records_them_cancelled(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """SIGINT twice: in-flight episodes are cancelled, their runs finish as `cancelled` (final:
    a rerun counts them, it does not drive them again), their executors are closed; exit 130."""
    opens, calls = tmp_path / "opens", tmp_path / "calls"
    rows = episodes_of(6, steps=2, model_sleep=30, opens=str(opens), calls=str(calls))
    episodes = write_episodes(tmp_path / "eps.jsonl", rows)
    store_path = tmp_path / "runs.sqlite"
    args = batch_args(episodes, store_path, concurrency=2)
    process = start_batch(args, env, tmp_path)
    # Two runs started, each in its model call; the second SIGINT only once the first is
    # handled (two signals close together may arrive as one).
    _wait_for(
        lambda: len({line["run_id"] for line in read_lines(str(calls))}) >= 2,
        "two episodes in flight",
    )
    process.send_signal(signal.SIGINT)
    assert process.stderr is not None
    seen = [process.stderr.readline()]
    while "stopping: no new episodes" not in seen[-1]:
        assert seen[-1], "".join(seen)
        seen.append(process.stderr.readline())
    process.send_signal(signal.SIGINT)
    rest = finish(process, timeout=60)
    first = Completed(rest.code, rest.stdout, "".join(seen) + rest.stderr)
    assert 130 == first.code, first.stderr
    cancelled = {
        run_id
        for run_id, line in results(tmp_path / "eps-results.jsonl").items()
        if line["status"] == "cancelled"
    }
    assert 2 == len(cancelled)
    assert {"cancelled"} == {e["how"] for e in read_lines(str(opens)) if e["event"] == "close"}
    logs = read_logs(store_path, cancelled)
    assert {"cancelled"} == {
        log.finished.result.stop_reason.value for log in logs.values() if log.finished
    }
    assert all(log.finished for log in logs.values())
    # The other episodes would wait 30 s per model call: rerun just the cancelled ones.
    only = write_episodes(tmp_path / "only.jsonl", [r for r in rows if r["run_id"] in cancelled])
    again = polyloop(*batch_args(only, store_path), env=env, cwd=tmp_path)
    assert 0 == again.code, again.stderr
    lines = results(tmp_path / "only-results.jsonl")
    assert {run_id: ("recorded", "cancelled") for run_id in cancelled} == {
        run_id: (line["status"], line["stop_reason"]) for run_id, line in lines.items()
    }


def test_the_readme_batch_command_works_when_pasted(tmp_path: Path) -> None:
    """The README's `polyloop batch` line, pasted in the clone (its .polyloop/ moved to a
    temporary directory), runs the example's 20 episodes; pasted again, counts them recorded."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Batches of episodes") :]
    start = section.index("```bash\n") + len("```bash\n")
    (line,) = section[start : section.index("```", start)].splitlines()
    assert line.startswith(".venv/bin/polyloop batch ")
    line = line.replace(".polyloop/", f"{tmp_path}/")
    env = users_shell(tmp_path / "home")
    first = pasted(line, env=env, cwd=ROOT)
    assert (0, True) == (first.code, "ran 20  resumed 0  recorded 0  error 0" in first.stdout)
    again = pasted(line, env=env, cwd=ROOT)
    assert (0, True) == (again.code, "ran 0  resumed 0  recorded 20  error 0" in again.stdout)
