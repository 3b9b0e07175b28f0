"""tests/serial_group.py: the tests that run alone exist, and every SIGKILL test is one of them."""

from __future__ import annotations

from pathlib import Path

from tests.serial_group import SERIAL, TESTS


def test_every_entry_names_a_test_directory_or_module() -> None:
    missing = [entry for entry in SERIAL if not (TESTS / entry).exists()]
    assert missing == []
    assert all(entry.endswith(".py") or (TESTS / entry).is_dir() for entry in SERIAL)


def test_every_module_that_sigkills_a_process_runs_alone() -> None:
    """A SIGKILL test waits for a real process to die and a successor to take over: timing."""
    groups = [TESTS / entry for entry in SERIAL]
    killing = [
        path
        for path in sorted(TESTS.rglob("test_*.py"))
        if "SIGKILL" in path.read_text() and path != Path(__file__)
    ]
    assert killing, "no SIGKILL test found: the search is broken"
    outside = [
        str(path.relative_to(TESTS))
        for path in killing
        if not any(path == group or group in path.parents for group in groups)
    ]
    assert outside == []


def test_no_snapshot_test_runs_alone() -> None:
    """scripts/test.sh lets the alone part only warn about unused snapshots (it deselects every
    snapshot test); that holds while every snapshot test runs in the parallel part."""
    groups = [TESTS / entry for entry in SERIAL]
    snapshotting = [
        path
        for path in sorted(TESTS.rglob("test_*.py"))
        if "SnapshotAssertion" in path.read_text() and path != Path(__file__)
    ]
    assert snapshotting, "no snapshot test found: the search is broken"
    alone = [
        str(path.relative_to(TESTS))
        for path in snapshotting
        if any(path == group or group in path.parents for group in groups)
    ]
    assert alone == []
