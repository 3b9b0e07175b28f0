"""The inspection commands run as a real subprocess: exit codes, --json, plain piped output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from polyloop.serialization import loads
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StepCompleted, StepRecord, StopReason
from tests.cli._kit import (
    ANSI_ESCAPE,
    action_intent,
    assert_one_line_error,
    final_step,
    finished,
    model_intent,
    model_result,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)

SAFE, NEVER = ReplayPolicy.SAFE, ReplayPolicy.NEVER


async def fill(store: SqliteRunStore | JsonlRunStore) -> None:
    """Three runs: one finished, one unfinished (action in doubt), one corrupt."""
    done = "run-done"
    await write(
        store,
        [
            started(done),
            *tool_step_records(done, 0, "lookup", SAFE),
            *tool_step_records(done, 1, "close", NEVER),
            finished(
                done, StopReason.TASK_COMPLETED, [tool_step(0, "lookup"), tool_step(1, "close")]
            ),
        ],
    )
    open_ = "run-open"
    await write(
        store,
        [
            started(open_),
            *tool_step_records(open_, 0, "lookup", SAFE),
            model_intent(open_, 1),
            model_result(open_, 1, "CALL pay {}"),
            action_intent(open_, 1, NEVER),
        ],
    )
    bad = "run-bad"
    # Step 1 recorded without a step 0: steps must be numbered 0..n-1.
    await write(
        store,
        [
            started(bad),
            model_intent(bad, 0),
            model_result(bad, 0, "FINAL: x"),
            StepCompleted(bad, None, None, final_step(1, "x")),
        ],
    )


@pytest.fixture
async def sqlite_url(sqlite_store: SqliteRunStore, sqlite_path: Path) -> str:
    await fill(sqlite_store)
    return f"sqlite://{sqlite_path}"


@pytest.fixture
async def jsonl_url(jsonl_store: JsonlRunStore) -> str:
    await fill(jsonl_store)
    return f"jsonl://{jsonl_store.directory}"


@pytest.fixture(params=["sqlite", "jsonl"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


def test_runs_lists_every_run_with_its_status(url: str, env: dict[str, str]) -> None:
    """Every run is listed with its status; the corrupt one is flagged and the exit code is 6."""
    result = polyloop("runs", "--store", url, "--json", env=env)
    assert result.code == 6, result.stderr
    error = json.loads(result.stderr)["error"]
    assert ("corrupt_log", True) == (error["kind"], "('run-bad')" in error["message"])
    rows = {row["run_id"]: row for row in result.json()["runs"]}
    assert set(rows) == {"run-done", "run-open", "run-bad"}
    assert (rows["run-done"]["status"], rows["run-done"]["stop_reason"]) == (
        "finished",
        "task_completed",
    )
    assert rows["run-done"]["steps"] == 2
    assert (rows["run-open"]["status"], rows["run-open"]["tail"]) == (
        "unfinished",
        "action_in_doubt",
    )
    assert rows["run-bad"]["status"] == "corrupt"
    assert "StepCompleted #0" in rows["run-bad"]["corrupt"]


def test_runs_piped_is_plain_text(url: str, env: dict[str, str]) -> None:
    """Piped, `runs` prints plain columns: no escape codes, no trailing spaces."""
    result = polyloop("runs", "--store", url, env=env)
    assert_one_line_error(result, 6)
    assert ANSI_ESCAPE not in result.stdout
    lines = result.stdout.splitlines()
    done = next(line for line in lines if line.startswith("run-done"))
    assert done.split()[1:3] == ["2", "task_completed"]
    assert any(line.startswith("run-open") and "unfinished" in line for line in lines)
    assert all(line == line.rstrip() for line in lines)


def test_show_has_one_row_per_step(sqlite_url: str, env: dict[str, str]) -> None:
    """show gives one row per step with the stop reason, in JSON and in plain piped text."""
    result = polyloop("show", "run-done", "--store", sqlite_url, "--json", env=env)
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["stop_reason"] == "task_completed"
    assert [row["step"] for row in document["steps"]] == [0, 1]
    assert document["steps"][1]["action"].startswith("close")
    assert document["pending"] == []

    text = polyloop("show", "run-done", "--store", sqlite_url, env=env)
    assert text.code == 0
    assert ANSI_ESCAPE not in text.stdout
    assert "task_completed" in text.stdout
    assert "close {}" in text.stdout


def test_show_full_has_every_step_record_field(sqlite_url: str, env: dict[str, str]) -> None:
    """show --full gives every StepRecord field (the seed's 18, then the added ones, shown at
    their default too) and the parameter snapshot."""
    result = polyloop("show", "run-done", "--full", "--store", sqlite_url, "--json", env=env)
    assert result.code == 0, result.stderr
    document = result.json()
    assert list(document["steps"][0]) == list(StepRecord.__dataclass_fields__)
    assert len(StepRecord.__dataclass_fields__) == 19
    assert [] == document["steps"][0]["calls_not_executed"]
    assert document["parameter_snapshot"]["request.tools.close.completes_run"] == "true"
    text = polyloop("show", "run-done", "--full", "--store", sqlite_url, env=env)
    for name in StepRecord.__dataclass_fields__:
        assert name in text.stdout


def test_show_of_an_unfinished_run_shows_what_is_in_flight(
    sqlite_url: str, env: dict[str, str]
) -> None:
    """show of an unfinished run lists the intent announced and never completed, with its replay
    policy."""
    result = polyloop("show", "run-open", "--store", sqlite_url, "--json", env=env)
    assert result.code == 0, result.stderr
    pending = result.json()["pending"]
    assert any("action intent 'action-1' (replay policy never)" in item for item in pending)


def test_export_writes_the_exact_step_serialization(url: str, env: dict[str, str]) -> None:
    """export --format jsonl writes each StepRecord exactly as polyloop.serialization writes it."""
    result = polyloop("export", "run-done", "--format", "jsonl", "--store", url, env=env)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert [loads(StepRecord, line) for line in lines] == [
        tool_step(0, "lookup"),
        tool_step(1, "close"),
    ]
    assert json.loads(lines[0])["schema_version"] == 1


def test_export_to_a_file_with_json_summary(
    sqlite_url: str, env: dict[str, str], tmp_path: Path
) -> None:
    """export -o FILE --json writes the steps to the file and a JSON summary to stdout."""
    target = tmp_path / "steps.jsonl"
    result = polyloop(
        "export", "run-open", "-o", str(target), "--store", sqlite_url, "--json", env=env
    )
    assert result.code == 0, result.stderr
    assert result.json() == {
        "run_id": "run-open",
        "format": "jsonl",
        "steps": 1,
        "output": str(target),
    }
    assert loads(StepRecord, target.read_text().strip()) == tool_step(0, "lookup")


def test_export_refuses_a_corrupt_log(sqlite_url: str, env: dict[str, str]) -> None:
    """export of a corrupt log is exit 6 in one line and writes nothing to stdout."""
    result = polyloop("export", "run-bad", "--store", sqlite_url, env=env)
    assert_one_line_error(result, 6)
    assert result.stdout == ""


def test_verify_a_good_run(sqlite_url: str, env: dict[str, str]) -> None:
    """verify of a valid run exits 0 saying ok."""
    result = polyloop("verify", "run-open", "--store", sqlite_url, env=env)
    assert result.code == 0, result.stderr
    assert "ok" in result.stdout


def test_verify_a_corrupt_run_exits_non_zero_naming_the_record(
    sqlite_url: str, env: dict[str, str]
) -> None:
    """verify of a corrupt run is exit 6 naming the offending record."""
    result = polyloop("verify", "run-bad", "--store", sqlite_url, env=env)
    assert_one_line_error(result, 6)
    assert "StepCompleted #0 (step_idx=1)" in result.stderr
    assert "CORRUPT" in result.stdout


def test_verify_all_reports_each_run(url: str, env: dict[str, str]) -> None:
    """verify --all --json gives a verdict per run and one JSON error line with exit 6."""
    result = polyloop("verify", "--all", "--store", url, "--json", env=env)
    assert result.code == 6
    document = result.json()
    assert document["ok"] is False
    verdicts = {run["run_id"]: run["ok"] for run in document["runs"]}
    assert verdicts == {"run-done": True, "run-open": True, "run-bad": False}
    error = json.loads(result.stderr)
    assert error["error"]["code"] == 6
    assert error["error"]["kind"] == "corrupt_log"


def test_verify_names_the_bad_line_of_a_damaged_jsonl_file(
    jsonl_url: str, env: dict[str, str]
) -> None:
    """verify of a run whose jsonl file has a replaced line is exit 6 naming the line; verify --all
    flags that run."""
    directory = Path(jsonl_url.removeprefix("jsonl://"))
    (path,) = [p for p in directory.glob("*.jsonl") if b'"run-done"' in p.read_bytes()]
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = b'{"this is": "not a record"}\n'
    path.write_bytes(b"".join(lines))
    url = jsonl_url
    result = polyloop("verify", "run-done", "--store", url, env=env)
    assert_one_line_error(result, 6)
    assert "line 3" in result.stderr
    whole = polyloop("verify", "--all", "--store", url, "--json", env=env)
    assert whole.code == 6
    assert {run["run_id"]: run["ok"] for run in whole.json()["runs"]}["run-done"] is False


def test_verify_needs_a_run_or_all(sqlite_url: str, env: dict[str, str]) -> None:
    """verify without RUN_ID or --all, or with both, is a usage error."""
    assert_one_line_error(polyloop("verify", "--store", sqlite_url, env=env), 2)
    assert_one_line_error(polyloop("verify", "x", "--all", "--store", sqlite_url, env=env), 2)


@pytest.mark.parametrize("command", ["show", "plan", "verify", "export"])
def test_unknown_run(command: str, sqlite_url: str, env: dict[str, str]) -> None:
    """A run the store does not hold is exit 5, suggesting polyloop runs."""
    result = polyloop(command, "no-such-run", "--store", sqlite_url, env=env)
    assert_one_line_error(result, 5)
    assert "polyloop runs" in result.stderr


@pytest.mark.parametrize(
    ("store", "code"),
    [
        ("mysql://db/runs", 3),
        ("memory:", 3),
        ("sqlite://host/x.sqlite", 3),
        ("definitely/not/here", 3),
        ("sqlite:///nonexistent/dir/runs.sqlite", 4),
        ("jsonl:///nonexistent/dir", 4),
    ],
)
def test_bad_or_missing_store(store: str, code: int, env: dict[str, str]) -> None:
    """A URL of an unknown scheme, a host part or no path is exit 3; a missing store is exit 4."""
    result = polyloop("runs", "--store", store, env=env)
    assert_one_line_error(result, code)


def test_the_default_store_is_the_demo_store_and_says_so_when_missing(
    env: dict[str, str],
) -> None:
    """Without --store the demo store is used; when missing, exit 4 naming POLYLOOP_HOME and the
    demo command."""
    result = polyloop("runs", env=env)
    assert_one_line_error(result, 4)
    assert "polyloop demo" in result.stderr
    assert env["POLYLOOP_HOME"] in result.stderr


def test_a_file_that_is_not_a_store(tmp_path: Path, env: dict[str, str]) -> None:
    """A text file given as a SQLite store is exit 7."""
    junk = tmp_path / "junk.sqlite"
    junk.write_text("this is not a database, just text " * 100)
    result = polyloop("runs", "--store", f"sqlite://{junk}", env=env)
    assert_one_line_error(result, 7)


def test_errors_in_json_mode_are_one_json_line(env: dict[str, str]) -> None:
    """With --json an error is one JSON line on stderr naming its kind, no traceback."""
    result = polyloop("runs", "--store", "mysql://x", "--json", env=env)
    assert result.code == 3
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert json.loads(line)["error"]["kind"] == "bad_store_url"


def test_usage_errors(env: dict[str, str]) -> None:
    """Missing arguments, unknown commands and bad choices are exit 2; --help lists every command."""
    assert_one_line_error(polyloop("show", env=env), 2)
    assert_one_line_error(polyloop("no-such-command", env=env), 2)
    assert_one_line_error(polyloop("export", "r", "--format", "csv", env=env), 2)
    help_text = polyloop("--help", env=env)
    assert help_text.code == 0
    for command in ("demo", "runs", "show", "plan", "verify", "export"):
        assert command in help_text.stdout


def test_a_jsonl_file_holding_only_a_torn_first_line_is_no_run(
    jsonl_url: str, env: dict[str, str]
) -> None:
    """A run file holding only a torn first line is neither a run nor a corruption for verify --all."""
    directory = Path(jsonl_url.removeprefix("jsonl://"))
    (directory / "torn.0000.jsonl").write_bytes(b'{"type": "run_started", "rec')
    result = polyloop("verify", "--all", "--store", jsonl_url, "--json", env=env)
    assert result.code == 6  # run-bad only
    assert [run["run_id"] for run in result.json()["runs"] if not run["ok"]] == ["run-bad"]


def test_python_dash_m_is_the_same_command(env: dict[str, str]) -> None:
    """python -m polyloop_cli behaves like the console script."""
    import subprocess
    import sys

    completed = subprocess.run(
        [sys.executable, "-m", "polyloop_cli", "runs", "--store", "memory:"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert completed.returncode == 3
    assert completed.stderr.startswith("polyloop: error: unknown store scheme 'memory'")
