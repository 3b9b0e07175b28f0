"""A factory that returns async context managers gets every store it made cleaned up by the kit."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract._runner import PYTEST_INI, run_contract

#: Each test here runs pytest in a subprocess.
pytestmark = pytest.mark.slow

CONFTEST = """\
import asyncio
import contextlib
import itertools
import os

import pytest
from tests.contract import broken_stores

JOURNAL = os.environ["CLEANUP_JOURNAL"]
numbers = itertools.count()


def note(*words):
    with open(JOURNAL, "a", encoding="utf-8") as journal:
        journal.write(" ".join(str(word) for word in words) + "\\n")


@contextlib.asynccontextmanager
async def opened(disk):
    store = broken_stores.ReferenceStore(disk)
    number, loop = next(numbers), id(asyncio.get_running_loop())
    test = os.environ["PYTEST_CURRENT_TEST"].rsplit(" (", 1)[0]
    note("open", number, loop, test)
    try:
        yield store
    finally:
        broken_stores.ReferenceStore.close(store)
        note("close", number, id(asyncio.get_running_loop()), test)
        if os.environ.get("CLEANUP_FAILS"):
            raise RuntimeError(f"could not drop the schema of store {number}")


@pytest.fixture
def polyloop_store_factory(tmp_path):
    disks = itertools.count()
    return lambda: opened(broken_stores.Disk(str(tmp_path / f"leases-{next(disks)}")))


@pytest.fixture
def polyloop_store_reopen():
    return lambda store: opened(store.disk)
"""


def _project(tmp_path: Path) -> Path:
    tmp_path.mkdir()
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    return tmp_path


def _journal(path: Path) -> list[list[str]]:
    return [line.split(" ", 3) for line in path.read_text().splitlines()]


def test_every_store_a_rule_made_is_cleaned_up_on_its_loop_within_its_rule(
    tmp_path: Path,
) -> None:
    """Every store the factory and the reopen callable yielded (hundreds, over the stateful
    rule's examples) is left again before the rule that made it ends, on the event loop that
    opened it; the rules pass as they do for a store returned as it is."""
    journal = tmp_path / "journal.txt"
    result = run_contract(
        _project(tmp_path / "project"),
        "--polyloop-contract",
        "-k",
        "run_store",
        env={"CLEANUP_JOURNAL": str(journal)},
    )
    assert {} == {k: v.message[:500] for k, v in result.failed().items()}
    opened = {
        number: (loop, test) for verb, number, loop, test in _journal(journal) if verb == "open"
    }
    closed = {
        number: (loop, test) for verb, number, loop, test in _journal(journal) if verb == "close"
    }
    assert opened == closed
    stateful = [test for _, test in opened.values() if "stateful" in test]
    assert len(stateful) >= 25  # one store per hypothesis example at least, all left again


def test_a_failing_clean_up_fails_the_rule_that_made_the_store(tmp_path: Path) -> None:
    """A context manager whose exit raises fails the rule that made the store, naming the
    clean-up and showing the implementation's error."""
    result = run_contract(
        _project(tmp_path / "project"),
        "--polyloop-contract",
        "-k",
        "unknown_run_reads_as_empty",
        env={"CLEANUP_JOURNAL": str(tmp_path / "journal.txt"), "CLEANUP_FAILS": "1"},
    )
    outcome = result.tests["run_store::test_unknown_run_reads_as_empty_log"]
    assert "error" == outcome.outcome, result.output[-3000:]
    assert (
        "RunStore rule 'the stores the factory made clean up': leaving the async context "
        "manager of a store (its clean-up) raised RuntimeError: could not drop the schema of "
        "store 0"
    ) in outcome.message
