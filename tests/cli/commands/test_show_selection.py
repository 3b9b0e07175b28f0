"""`show` of a long run: a selection of steps (the last N, a range) and the run's totals."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StopReason
from tests.cli._kit import (
    assert_one_line_error,
    finished,
    parse_failure_records,
    parse_failure_step,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)

RUN = "long-run"
STEPS = 30
#: Steps whose reply did not parse (no action); the others executed a tool.
PARSE_FAILURES = frozenset({4, 17})


@pytest.fixture
async def url(sqlite_store: SqliteRunStore, sqlite_path: Path) -> str:
    records: list[object] = [started(RUN)]
    steps = []
    for k in range(STEPS):
        if k in PARSE_FAILURES:
            records += parse_failure_records(RUN, k)
            steps.append(parse_failure_step(k))
        else:
            records += tool_step_records(RUN, k, "lookup", ReplayPolicy.SAFE)
            steps.append(tool_step(k, "lookup"))
    records.append(finished(RUN, StopReason.STEP_BUDGET, steps))
    await write(sqlite_store, records)  # type: ignore[arg-type]
    return f"sqlite://{sqlite_path}"


def shown_steps(url: str, env: dict[str, str], *selection: str) -> list[int]:
    result = polyloop("show", RUN, *selection, "--store", url, "--json", env=env)
    assert 0 == result.code, result.stderr
    return [row["step"] for row in result.json()["steps"]]


@pytest.mark.parametrize(
    ("selection", "expected"),
    [
        ((), list(range(STEPS))),
        (("--last", "5"), [25, 26, 27, 28, 29]),
        (("--last", "99"), list(range(STEPS))),
        (("--steps", "3-5"), [3, 4, 5]),
        (("--steps", "27-"), [27, 28, 29]),
        (("--steps", "-1"), [0, 1]),
        (("--steps", "7"), [7]),
        (("--steps", "40-50"), []),
    ],
)
def test_a_selection_shows_exactly_those_steps(
    url: str, env: dict[str, str], selection: tuple[str, ...], expected: list[int]
) -> None:
    """--last N takes the last N steps; --steps FROM-TO takes the indexes in the range."""
    assert expected == shown_steps(url, env, *selection)


def test_the_totals_count_the_whole_run_whatever_is_selected(url: str, env: dict[str, str]) -> None:
    """Totals (JSON and the text line) cover every step, not only the selected ones."""
    result = polyloop("show", RUN, "--last", "3", "--store", url, "--json", env=env)
    assert {
        "steps": STEPS,
        "executed_actions": STEPS - len(PARSE_FAILURES),
        "parse_failures": len(PARSE_FAILURES),
        "wall_ms": 3 * (STEPS - len(PARSE_FAILURES)) + 1 * len(PARSE_FAILURES),
        "status": "finished",
        "stop_reason": "step_budget",
        "tail": None,
    } == result.json()["totals"]
    text = polyloop("show", RUN, "--last", "3", "--store", url, env=env)
    lines = text.stdout.splitlines()
    assert "Showing steps 27-29 (3 of 30)." in lines
    assert [27, 28, 29] == [int(line.split()[0]) for line in lines if line[:1].isdigit()]
    assert (
        "Totals: 30 steps, 28 executed actions, 2 parse failures, wall time 86 ms, "
        "stop reason step_budget."
    ) == lines[-1]


@pytest.mark.parametrize(
    ("selection", "complaint"),
    [
        (("--last", "0"), "--last"),
        (("--steps", "5-3"), "ends before it starts"),
        (("--steps", "x"), "is not a step range"),
        (("--steps", "-"), "is not a step range"),
        (("--last", "2", "--steps", "1-2"), "give --last or --steps, not both"),
    ],
)
def test_a_bad_selection_is_a_usage_error(
    url: str, env: dict[str, str], selection: tuple[str, ...], complaint: str
) -> None:
    """A selection that cannot be read is exit 2 with one line saying how to write it."""
    result = polyloop("show", RUN, *selection, "--store", url, env=env)
    assert_one_line_error(result, 2)
    assert complaint in result.stderr
