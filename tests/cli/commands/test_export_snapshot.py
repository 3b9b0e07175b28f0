"""`polyloop export --format snapshot` writes a stored run's log in the trajectory snapshot form."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
from syrupy.filters import props

from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import ReplayPolicy, StopReason
from polyloop_contract.snapshot import MASKED, TrajectorySnapshotExtension
from polyloop_contract.trajectory_json import run_log_from_json, trajectory_json
from tests.cli._kit import (
    SNAPSHOT,
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


# ---------------------------------------------------------------------------
# --mask: the masks a downstream's trajectory_snapshot takes
# ---------------------------------------------------------------------------


async def _run_stored_in(path: Path) -> tuple[str, SqliteRunStore]:
    """One finished run in a SQLite store at ``path``, the path in the parameter snapshot as
    the store reports it (what makes a snapshot machine-specific)."""
    store = SqliteRunStore(path)
    snapshot = {**SNAPSHOT, "store.kind": "sqlite", "store.path": str(path)}
    await write(
        store,
        [
            started(RUN_ID, snapshot),
            *tool_step_records(RUN_ID, 0, "close", ReplayPolicy.NEVER),
            finished(RUN_ID, StopReason.TASK_COMPLETED, [tool_step(0, "close")]),
        ],
    )
    return f"sqlite://{path}", store


async def test_masked_export_is_what_trajectory_snapshot_writes_with_the_same_props(
    tmp_path: Path, env: dict[str, str]
) -> None:
    url, store = await _run_stored_in(tmp_path / "runs.sqlite")
    log = await store.read_log(RUN_ID)
    store.close()

    result = polyloop(
        "export", RUN_ID, "--format", "snapshot", "--mask", "store.path", "--mask", "call_id",
        "--store", url, env=env,
    )  # fmt: skip

    assert 0 == result.code, result.stderr
    assert "" == result.stderr
    expected = TrajectorySnapshotExtension().serialize(log, exclude=props("store.path", "call_id"))
    assert expected == result.stdout
    assert f'"store.path": "{MASKED}"' in result.stdout
    assert str(tmp_path) not in result.stdout
    assert trajectory_json(log, mask=("store.path", "call_id")) == result.stdout


async def test_one_run_stored_in_two_places_exports_alike_once_its_path_is_masked(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The same run in two files (two machines, two pytest sessions): the snapshots differ by
    the store's path alone, and masking it makes them equal."""
    exports = {}
    for name in ("first", "second"):
        url, store = await _run_stored_in(tmp_path / f"{name}.sqlite")
        store.close()
        plain = polyloop("export", RUN_ID, "--format", "snapshot", "--store", url, env=env)
        masked = polyloop(
            "export", RUN_ID, "--format", "snapshot", "--mask", "store.path", "--store", url,
            env=env,
        )  # fmt: skip
        assert (0, 0) == (plain.code, masked.code), (plain.stderr, masked.stderr)
        exports[name] = (plain.stdout, masked.stdout)

    assert exports["first"][0] != exports["second"][0]
    assert exports["first"][1] == exports["second"][1]


async def test_a_mask_that_matches_nothing_is_noted_and_masks_nothing(
    stored: tuple[str, SqliteRunStore | JsonlRunStore], env: dict[str, str]
) -> None:
    url, store = stored
    result = polyloop(
        "export", RUN_ID, "--format", "snapshot", "--mask", "store.pth", "--store", url, env=env
    )

    assert 0 == result.code, result.stderr
    assert trajectory_json(await store.read_log(RUN_ID)) == result.stdout
    assert "--mask store.pth matched no field of run" in " ".join(result.stderr.split())


async def test_the_json_summary_names_the_masks(
    stored: tuple[str, SqliteRunStore | JsonlRunStore], env: dict[str, str], tmp_path: Path
) -> None:
    url, store = stored
    target = tmp_path / "masked.json"
    result = polyloop(
        "export", RUN_ID, "--format", "snapshot", "--mask", "call_id", "--mask", "observation",
        "-o", str(target), "--store", url, "--json", env=env,
    )  # fmt: skip

    assert 0 == result.code, result.stderr
    assert ["call_id", "observation"] == result.json()["masked"]
    log = await store.read_log(RUN_ID)
    assert trajectory_json(log, mask=("call_id", "observation")) == target.read_text()


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        (("--mask", "store.path"), "--mask applies to --format snapshot only"),
        (("--format", "jsonl", "--mask", "call_id"), "--mask applies to --format snapshot only"),
        (("--format", "snapshot", "--mask", ""), "--mask needs a field name"),
    ],
)
def test_a_mask_where_it_cannot_apply_is_refused_in_one_line(
    stored: tuple[str, SqliteRunStore | JsonlRunStore],
    env: dict[str, str],
    arguments: tuple[str, ...],
    says: str,
) -> None:
    url, _ = stored
    result = polyloop("export", RUN_ID, *arguments, "--store", url, env=env)

    assert_one_line_error(result, 2)
    assert says in result.stderr
    assert "" == result.stdout


async def test_runs_started_at_different_times_export_alike_once_started_at_is_masked(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """`--mask started_at` (design 0061): the same run started at two times exports to one
    text, the key kept and reading "<masked>"."""
    texts = []
    for name, at in (("a", "2026-12-07T04:05:06+00:00"), ("b", "2026-12-08T00:00:00+00:00")):
        store = SqliteRunStore(tmp_path / f"{name}.sqlite")
        records = [
            replace(started(RUN_ID), started_at=at),
            *tool_step_records(RUN_ID, 0, "close", ReplayPolicy.NEVER),
            finished(RUN_ID, StopReason.TASK_COMPLETED, [tool_step(0, "close")]),
        ]
        await write(store, records)
        store.close()
        url = f"sqlite://{tmp_path / f'{name}.sqlite'}"
        plain = polyloop("export", RUN_ID, "--format", "snapshot", "--store", url, env=env)
        assert f'"started_at": "{at}"' in plain.stdout
        masked = polyloop(
            "export", RUN_ID, "--format", "snapshot", "--mask", "started_at", "--store", url,
            env=env,
        )  # fmt: skip
        assert 0 == masked.code, masked.stderr
        texts.append(masked.stdout)
    assert texts[0] == texts[1]
    assert f'"started_at": "{MASKED}"' in texts[0]
