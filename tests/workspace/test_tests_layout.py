"""The tests are laid out by the module they test (tests/layout.py, design record 0058)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.layout import CROSS_CUTTING, KILL_WORD, NOT_A_CRASH, ROOT, TESTS, misplaced


def _test_modules() -> list[Path]:
    return sorted(path for path in TESTS.rglob("test_*.py") if "__pycache__" not in path.parts)


def test_every_test_module_lives_under_the_module_it_tests_or_a_cross_cutting_home() -> None:
    modules = _test_modules()
    assert len(modules) > 100, "few test modules found: the search is broken"
    wrong = {
        str(path.relative_to(TESTS)): reason
        for path in modules
        if (reason := misplaced(path)) is not None
    }
    assert wrong == {}


@pytest.mark.parametrize(
    ("where", "kept"),
    [
        ("core/session/test_x.py", True),  # polyloop.session, a package
        ("core/asking/test_x.py", True),  # polyloop.asking, a module
        ("core/test_x.py", True),  # polyloop's top-level modules
        ("stores/postgres/test_x.py", True),
        ("cli/test_x.py", True),
        ("workspace/scripts/test_x.py", True),
        ("unit/test_x.py", False),  # a kind, not a module
        ("core/stores/test_x.py", False),  # stores is another distribution
        ("adapters/nothing/test_x.py", False),
        ("test_x.py", False),
    ],
)
def test_the_rule_keeps_module_folders_and_refuses_the_rest(where: str, kept: bool) -> None:
    assert (misplaced(TESTS / where) is None) == kept


def test_the_cross_cutting_homes_exist() -> None:
    assert all((TESTS / home).is_dir() for home in CROSS_CUTTING)


def test_every_module_that_kills_a_process_is_marked_crash() -> None:
    """``-m crash`` selects every test that kills a process (at module level or on the test)."""
    killing = [
        path
        for path in _test_modules()
        if KILL_WORD in path.read_text() and str(path.relative_to(TESTS)) not in NOT_A_CRASH
    ]
    assert len(killing) > 5, "few killing modules found: the search is broken"
    unmarked = [
        str(path.relative_to(TESTS))
        for path in killing
        if "pytest.mark.crash" not in path.read_text()
    ]
    assert unmarked == []
    assert all((TESTS / entry).is_file() for entry in NOT_A_CRASH)


def test_every_snapshot_file_sits_beside_its_test_module() -> None:
    """syrupy names ``__snapshots__/<module>.ambr`` after the module: moved together or lost."""
    snapshots = sorted(TESTS.rglob("__snapshots__/*.ambr"))
    assert snapshots, "no snapshot file found: the search is broken"
    orphans = [
        str(path.relative_to(ROOT))
        for path in snapshots
        if not (path.parent.parent / f"{path.stem}.py").is_file()
    ]
    assert orphans == []
