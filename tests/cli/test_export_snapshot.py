"""`polyloop export --format snapshot` writes a stored run's log in the trajectory snapshot form."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StopReason
from polyloop_contract.trajectory_json import run_log_from_json, trajectory_json
from tests.cli._kit import (
    assert_one_line_error,
    finished,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)

RUN_ID = "run-snapshot"


@pytest.fixture(params=["sqlite", "jsonl"])
async def stored(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[str, SqliteRunStore | JsonlRunStore]]:
    """A store URL holding one finished two-step run, and the store object that wrote it."""
    if request.param == "sqlite":
        store: SqliteRunStore | JsonlRunStore = SqliteRunStore(tmp_path / "runs.sqlite")
        url = f"sqlite://{tmp_path / 'runs.sqlite'}"
    else:
        store = JsonlRunStore(tmp_path / "runs-jsonl")
        url = f"jsonl://{tmp_path / 'runs-jsonl'}"
    await write(
        store,
        [
            started(RUN_ID),
            *tool_step_records(RUN_ID, 0, "lookup", ReplayPolicy.SAFE),
            *tool_step_records(RUN_ID, 1, "close", ReplayPolicy.NEVER),
            finished(
                RUN_ID, StopReason.TASK_COMPLETED, [tool_step(0, "lookup"), tool_step(1, "close")]
            ),
        ],
    )
    yield url, store
    store.close()


async def test_export_snapshot_is_the_trajectory_snapshot_of_the_log(
    stored: tuple[str, SqliteRunStore | JsonlRunStore], env: dict[str, str]
) -> None:
    """The exported text is exactly the kit's snapshot of the stored log, and reads back to it."""
    url, store = stored
    log = await store.read_log(RUN_ID)
    result = polyloop("export", RUN_ID, "--format", "snapshot", "--store", url, env=env)
    assert 0 == result.code, result.stderr
    assert trajectory_json(log) == result.stdout
    assert log == run_log_from_json(result.stdout)
    assert '      "schema_version": 1\n' in result.stdout


async def test_export_snapshot_to_a_file(
    stored: tuple[str, SqliteRunStore | JsonlRunStore], env: dict[str, str], tmp_path: Path
) -> None:
    """With --output the snapshot goes to the file, and --json summarises the export."""
    url, store = stored
    target = tmp_path / "run.json"
    result = polyloop(
        "export", RUN_ID, "--format", "snapshot", "-o", str(target), "--store", url, "--json",
        env=env,
    )  # fmt: skip
    assert 0 == result.code, result.stderr
    expected = {"run_id": RUN_ID, "format": "snapshot", "steps": 2, "output": str(target)}
    assert expected == result.json()
    assert trajectory_json(await store.read_log(RUN_ID)) == target.read_text(encoding="utf-8")


def test_export_snapshot_without_the_kit_says_what_to_install(
    stored: tuple[str, SqliteRunStore | JsonlRunStore], env: dict[str, str], tmp_path: Path
) -> None:
    """Without polyloop-contract installed, --format snapshot fails in one line naming the extra."""
    # The workspace has the kit installed; a package of the same name earlier on the path that
    # fails to import stands in for an environment without it.
    shadow = tmp_path / "shadow" / "polyloop_contract"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('polyloop-contract is not installed')\n")
    url, _ = stored
    result = polyloop(
        "export", RUN_ID, "--format", "snapshot", "--store", url,
        env={**env, "PYTHONPATH": str(shadow.parent)},
    )  # fmt: skip
    assert_one_line_error(result, 2)
    assert "pip install 'polyloop-cli[snapshot]'" in result.stderr
    assert "" == result.stdout
