"""On an 80-column terminal: ids never broken, free text cut or folded, `--full` uncut.

The commands run on a real pseudo-terminal 80 columns wide (`COLUMNS=80` too), as a user's
shell runs them; `--json` and piped output are not affected by the width.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StepCompleted, StopReason
from tests.cli._kit import (
    ANSI_ESCAPE,
    SNAPSHOT,
    action_intent,
    finished,
    model_intent,
    model_result,
    one_line,
    outcome,
    polyloop,
    polyloop_on_terminal,
    printed_commands,
    started,
    tool_step,
    write,
)

LONG_ID = "nightly-eval-2026-12-01T10:08:38Z-worker-17-episode-0042"
SHORT_ID = "demo-20261201T100838Z-1e68-a"
LONG_MODEL = "an-extremely-long-model-name-that-no-table-column-can-hold-whole-2026"
OBSERVATION = " ".join(f"word{index}" for index in range(80))


async def long_run(store: SqliteRunStore, run_id: str, steps: int) -> None:
    """A finished run whose steps all carry an observation far wider than a terminal; its
    last step calls the completing tool."""
    records: list[object] = [started(run_id, {**SNAPSHOT, "model_client.model": LONG_MODEL})]
    all_steps = []
    for k in range(steps):
        tool, policy = (
            ("close", ReplayPolicy.NEVER) if k == steps - 1 else ("lookup", ReplayPolicy.SAFE)
        )
        step = tool_step(k, tool, OBSERVATION)
        all_steps.append(step)
        records += [
            model_intent(run_id, k),
            model_result(run_id, k, f"CALL {tool} {{}}"),
            action_intent(run_id, k, policy),
            StepCompleted(run_id, f"action-{k}", outcome(OBSERVATION), step),
        ]
    records.append(finished(run_id, StopReason.TASK_COMPLETED, all_steps))
    await write(store, records)  # type: ignore[arg-type]


@pytest.fixture
async def url(sqlite_store: SqliteRunStore, sqlite_path: Path) -> str:
    await long_run(sqlite_store, LONG_ID, 3)
    await long_run(sqlite_store, SHORT_ID, 2)
    return f"sqlite://{sqlite_path}"


def screen_lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.splitlines()]


def test_runs_at_80_columns_keeps_every_id_whole_and_cuts_the_model(
    url: str, env: dict[str, str]
) -> None:
    """Every line fits 80 columns, each run id stands whole on its row, the model is cut."""
    result = polyloop_on_terminal("runs", "--store", url, env=env, columns=100)
    assert 0 == result.code, result.stdout
    lines = screen_lines(result.stdout)
    assert [] == [line for line in lines if len(line) > 100]
    rows = [line for line in lines if line.startswith((LONG_ID, SHORT_ID))]
    assert [LONG_ID, SHORT_ID] == [row.split()[0] for row in rows]
    assert all("task_completed" in row and row.endswith("…") for row in rows), rows


def test_runs_too_narrow_for_the_model_drops_it_and_says_so(url: str, env: dict[str, str]) -> None:
    """At 80 columns a 56-character id leaves no room for the model: the column is left out
    (with a note), and no id or status is broken."""
    result = polyloop_on_terminal("runs", "--store", url, env=env)
    assert 0 == result.code, result.stdout
    lines = screen_lines(result.stdout)
    assert [] == [line for line in lines if len(line) > 80]
    rows = [line.split() for line in lines if line.startswith((LONG_ID, SHORT_ID))]
    assert [[LONG_ID, "3", "task_completed"], [SHORT_ID, "2", "task_completed"]] == rows
    assert any(line.startswith("(MODEL not shown: the terminal is too narrow") for line in lines)


def test_show_at_80_columns_is_one_line_per_step(url: str, env: dict[str, str]) -> None:
    """Each step is one row of at most 80 columns; the observation is cut with an ellipsis."""
    result = polyloop_on_terminal("show", LONG_ID, "--store", url, env=env)
    assert 0 == result.code, result.stdout
    lines = screen_lines(result.stdout)
    assert [] == [line for line in lines if len(line) > 80]
    rows = [line for line in lines if line[:1].isdigit()]
    assert ["0", "1", "2"] == [row.split()[0] for row in rows]
    assert all("word0 word1" in row and "word79" not in row and "…" in row for row in rows)
    assert f"run     {LONG_ID}" in lines


def test_show_full_at_80_columns_shows_every_word(url: str, env: dict[str, str]) -> None:
    """`--full` cuts nothing: the whole observation is there, folded within 80 columns."""
    result = polyloop_on_terminal("show", SHORT_ID, "--full", "--store", url, env=env)
    assert 0 == result.code, result.stdout
    lines = screen_lines(result.stdout)
    assert [] == [line for line in lines if len(line) > 80]
    words = {word.strip('"') for word in result.stdout.split()}
    assert set() == {f"word{index}" for index in range(80)} - words
    assert LONG_MODEL in "".join(result.stdout.split())  # folded, every character shown


def test_the_width_does_not_touch_json_or_piped_output(url: str, env: dict[str, str]) -> None:
    """`COLUMNS=80` does not change `--json`; piped without COLUMNS, rows are whole (one row per
    step, uncut ids and model); piped with it, the rows fit it as on a terminal (design 0060)."""
    narrow = {**env, "COLUMNS": "80"}
    document = polyloop("show", LONG_ID, "--store", url, "--json", env=narrow).json()
    assert OBSERVATION == document["steps"][0]["observation"]
    piped = polyloop("runs", "--store", url, env=env)
    assert LONG_MODEL in piped.stdout
    fitted = polyloop("show", LONG_ID, "--store", url, env=narrow)
    assert 0 == fitted.code, fitted.stderr
    lines = fitted.stdout.splitlines()
    assert [] == [line for line in lines if len(line) > 80 or line != line.rstrip()]
    assert ["0", "1", "2"] == [line.split()[0] for line in lines if line[:1].isdigit()]
    assert ANSI_ESCAPE not in fitted.stdout


def test_the_demo_at_80_columns_breaks_no_id_and_no_stop_reason(tmp_path: Path) -> None:
    """The demo's whole story fits 80 columns with run ids and stop reasons never split."""
    from tests.cli._kit import clean_env

    result = polyloop_on_terminal("demo", env=clean_env(tmp_path / "home"), cwd=tmp_path)
    assert 0 == result.code, result.stdout
    lines = screen_lines(result.stdout)
    assert [] == [line for line in lines if len(line) > 80]
    assert "Stop reasons: run A task_completed, run B resume_state_unknown." in lines
    inspect = lines[lines.index("Inspect the runs (each line works when pasted here):") + 1 :]
    commands = [one_line(command) for command in printed_commands(inspect)]
    assert ["runs", "show", "plan", "export", "view"] == [c.split()[1] for c in commands]
    assert all(command.split()[-1].startswith("demo-") for command in commands[1:])
