"""The kit catches real defects: each broken store fails the rule written for its defect."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.contract._runner import PYTEST_INI, Outcome, Result, run_contract
from tests.contract.broken_stores import (
    CAUGHT_BY,
    CAUGHT_BY_STATEFUL,
    CORRECT,
    REPORTED_AS_SEVERAL,
    STORES,
)

#: Each test here runs pytest in a subprocess.
pytestmark = pytest.mark.slow

CONFTEST = """\
import functools
import itertools
import os

import pytest
from hypothesis import settings
from polyloop_contract import RefusedStore
from tests.contract import broken_stores

# Hypothesis loads a derandomized profile of its own when it sees CI; these runs pin a seed.
settings.register_profile("seeded", derandomize=False)
settings.load_profile("seeded")

CHOSEN = os.environ.get("BROKEN_STORES", "").split(",") if os.environ.get("BROKEN_STORES") else None


@pytest.fixture(params=sorted(CHOSEN or broken_stores.STORES))
def store_name(request):
    return request.param


@pytest.fixture
def polyloop_store_factory(store_name, tmp_path):
    store_class = broken_stores.STORES[store_name]
    numbers = itertools.count()
    opened = []

    def make():
        store = store_class(broken_stores.Disk(str(tmp_path / f"leases-{next(numbers)}")))
        opened.append(store)
        return store

    yield make
    for store in opened:
        broken_stores.ReferenceStore.close(store)


@pytest.fixture
def polyloop_store_reopen():
    return broken_stores.reopen


@pytest.fixture
def polyloop_store_refused(store_name, tmp_path):
    store_class = broken_stores.STORES[store_name]
    disk = broken_stores.Disk(str(tmp_path / "refused-leases"), refuses="hunter2-refused")
    return [RefusedStore(lambda: store_class(disk), secrets=("hunter2-refused",))]


@pytest.fixture
def polyloop_store_child_opener(store_name):
    if store_name not in broken_stores.CHILD_OPENED:
        return None
    return lambda store: functools.partial(
        broken_stores.reopen_in_child, type(store), store.disk.lease_directory
    )
"""


def _project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    project = tmp_path_factory.mktemp("broken-stores")
    (project / "pytest.ini").write_text(PYTEST_INI)
    (project / "conftest.py").write_text(CONFTEST)
    return project


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> Result:
    """Every store through every RunStore rule except the stateful one, in one process."""
    return run_contract(
        _project(tmp_path_factory), "--polyloop-contract", "-k", "run_store and not stateful"
    )


@pytest.fixture(scope="module")
def stateful_run(tmp_path_factory: pytest.TempPathFactory) -> Result:
    """The reference and a few broken stores through the stateful rule, with a fixed seed."""
    return run_contract(
        _project(tmp_path_factory),
        "--polyloop-contract",
        "-k",
        "stateful",
        "--hypothesis-seed=20261129",
        env={"BROKEN_STORES": ",".join(["reference", *CAUGHT_BY_STATEFUL, *REPORTED_AS_SEVERAL])},
    )


def _key(test: str, store: str) -> str:
    name, _, extra = test.partition("[")
    return f"{name}[{store}-{extra.rstrip(']')}]" if extra else f"{name}[{store}]"


def test_there_are_at_least_ten_broken_stores() -> None:
    """The issue asks for at least ten; each names the rule that must catch it."""
    assert len(CAUGHT_BY) >= 10
    assert set(CAUGHT_BY) == set(STORES) - set(CORRECT)


def _tests_of(run: Result, store: str) -> dict[str, Outcome]:
    return {k: v for k, v in run.tests.items() if f"[{store}]" in k or f"[{store}-" in k}


def test_reference_store_passes_every_rule(broken_run: Result) -> None:
    """The correct store the broken ones derive from passes all RunStore rules, reopen and
    the lease rules (a real child process killed while holding a lease) included."""
    mine = _tests_of(broken_run, "reference")
    assert len(mine) >= 30, broken_run.output[-3000:]
    assert {} == {k: v.message[:500] for k, v in mine.items() if v.outcome != "passed"}
    assert any("holder_is_killed" in k for k in mine)


def test_a_store_without_leases_passes_and_is_reported_once(broken_run: Result) -> None:
    """A correct store that does not implement RunLeasing passes every other rule; the lease
    rules are skipped, and the report says once that they did not apply."""
    mine = _tests_of(broken_run, "reference_without_leases")
    leases = {k: v.outcome for k, v in mine.items() if k.startswith("run_store_leases::")}
    assert len(leases) >= 5
    assert {"skipped"} == set(leases.values())
    assert {} == {
        k: v.message[:500]
        for k, v in mine.items()
        if not k.startswith("run_store_leases::") and v.outcome != "passed"
    }
    line = (
        "NOT APPLICABLE RunStore lease rules did not apply (for [reference_without_leases]): "
        "WithoutLeases does not implement polyloop.ports.RunLeasing"
    )
    assert 1 == broken_run.output.count(line), broken_run.output[-3000:]


@pytest.mark.parametrize("store", sorted(CAUGHT_BY))
def test_broken_store_fails_the_rule_for_its_defect(broken_run: Result, store: str) -> None:
    """The suite fails the broken store on the expected rule, and the message names that rule."""
    expected = CAUGHT_BY[store]
    key = _key(expected.test, store)
    assert key in broken_run.tests, f"{key} was not run:\n{broken_run.output[-3000:]}"
    outcome = broken_run.tests[key]
    assert "failed" == outcome.outcome, outcome.message[:2000]
    assert f"RunStore rule '{expected.rule}'" in outcome.message, outcome.message[:2000]
    assert [] == [text for text in expected.says if text not in outcome.message], outcome.message
    assert 0 != broken_run.returncode


#: The longest line a failure report may have: a value longer than that is cut, with a note.
LONGEST_REPORT_LINE = 2_100


def test_no_failure_report_has_a_line_nobody_can_read(broken_run: Result) -> None:
    """Every failure report of every broken store keeps each line short: long values (a
    10 000-character run_id, a 65 535-character observation) are cut with their length."""
    failed = {k: v.message for k, v in broken_run.tests.items() if v.outcome == "failed"}
    assert len(failed) >= len(CAUGHT_BY)
    longest = {k: max(len(line) for line in m.splitlines()) for k, m in failed.items()}
    assert {} == {k: n for k, n in longest.items() if n > LONGEST_REPORT_LINE}


def test_stateful_rule_passes_the_reference_store(stateful_run: Result) -> None:
    """The state machine finds nothing wrong with the correct store."""
    key = "run_store_stateful::test_store_matches_a_model_of_the_log[reference]"
    assert key in stateful_run.tests, stateful_run.output[-3000:]
    assert "passed" == stateful_run.tests[key].outcome, stateful_run.tests[key].message[:2000]


def test_stateful_rule_reports_each_distinct_failure_by_its_rule(stateful_run: Result) -> None:
    """When hypothesis finds several distinct failures, the report's first line (JUnit's
    message) counts them and names each one's rule, and the report explains each in turn,
    instead of an exception group raised through the kit's internals."""
    for store in REPORTED_AS_SEVERAL:
        key = f"run_store_stateful::test_store_matches_a_model_of_the_log[{store}]"
        outcome = stateful_run.tests[key]
        assert "failed" == outcome.outcome, outcome.message[:2000]
        headline = outcome.message.split("\n", 1)[0]
        count = int(headline.split(" distinct failures: ", 1)[0])
        assert count >= 2, headline
        assert count == headline.count("RunStore rule '"), headline
        assert "RunStore rule 'second RunFinished refused'" in headline
        assert "RunStore rule 'store matches a model of the log'" in headline
        assert "--- failure 2 of" in outcome.message
        assert "ExceptionGroup" not in outcome.message
        assert "polyloop_contract/_checks.py" not in outcome.message


@pytest.mark.parametrize("store", CAUGHT_BY_STATEFUL)
def test_stateful_rule_catches_broken_store(stateful_run: Result, store: str) -> None:
    """Random interleavings compared with a model of the log also expose these defects."""
    key = f"run_store_stateful::test_store_matches_a_model_of_the_log[{store}]"
    assert key in stateful_run.tests, stateful_run.output[-3000:]
    outcome = stateful_run.tests[key]
    assert "failed" == outcome.outcome, outcome.message[:2000]
    assert "RunStore rule '" in outcome.message, outcome.message[:2000]
