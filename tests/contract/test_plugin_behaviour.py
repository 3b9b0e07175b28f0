"""How the plugin behaves around the suites: off by default, skips that name fixtures, -k, collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from polyloop_contract import StoreCapabilities
from tests.contract._runner import PYTEST_INI, run_contract

#: Each test here runs pytest in a subprocess.
pytestmark = pytest.mark.slow

MEMORY_CONFTEST = """\
import pytest
from polyloop.stores.memory import MemoryRunStore


@pytest.fixture
def polyloop_store_factory():
    return MemoryRunStore
"""

PLAIN_TEST = """\
import sys


def test_plain():
    assert "polyloop_contract.suites" not in sys.modules
    assert "polyloop_contract._checks" not in sys.modules
    assert "polyloop_contract.fixtures" not in sys.modules
"""


def _project(root: Path, files: dict[str, str]) -> Path:
    (root / "pytest.ini").write_text(PYTEST_INI)
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_without_the_flag_nothing_is_collected_or_loaded(tmp_path: Path) -> None:
    """With the plugin installed but no flag, only the project's own test runs; no suite loads."""
    project = _project(tmp_path, {"conftest.py": MEMORY_CONFTEST, "test_plain.py": PLAIN_TEST})
    result = run_contract(project)
    assert 0 == result.returncode, result.output[-3000:]
    assert ["test_plain::test_plain"] == list(result.tests)
    assert "polyloop-contract report" not in result.output


def test_without_the_flag_no_kit_fixture_exists(tmp_path: Path) -> None:
    """The kit's default fixtures are registered only under the flag."""
    test = "def test_uses(polyloop_decision_parser):\n    pass\n"
    result = run_contract(_project(tmp_path, {"test_uses.py": test}))
    assert "fixture 'polyloop_decision_parser' not found" in result.output


def test_importing_the_plugin_is_cheap() -> None:
    """The entry-point module imports neither hypothesis, nor polyloop, nor the suites."""
    code = (
        "import sys, polyloop_contract.plugin\n"
        "heavy = [m for m in ('hypothesis', 'polyloop', 'polyloop_contract.suites',"
        " 'polyloop_contract._checks') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert "[]" == done.stdout.strip()


def test_missing_fixtures_skip_with_their_names(tmp_path: Path) -> None:
    """With the flag and no fixtures at all, every rule is skipped naming the fixture to provide."""
    result = run_contract(_project(tmp_path, {}), "--polyloop-contract")
    assert 0 == result.returncode, result.output[-3000:]
    assert len(result.tests) > 40
    assert {"skipped"} == {v.outcome for v in result.tests.values()}
    for fixture in (
        "polyloop_store_factory",
        "polyloop_decision_parser",
        "polyloop_model_client",
        "polyloop_model_client_failing",
        "polyloop_action_executor",
        "polyloop_action_executor_failing",
        "polyloop_event_sink",
    ):
        assert f"provide a fixture named '{fixture}'" in result.output, fixture
    assert "polyloop-contract report" in result.output


def test_each_rule_is_its_own_test_and_k_selects_it(tmp_path: Path) -> None:
    """-k picks a single rule out of the kit."""
    project = _project(tmp_path, {"conftest.py": MEMORY_CONFTEST})
    result = run_contract(project, "--polyloop-contract", "-k", "unknown_run_reads_as_empty")
    assert 0 == result.returncode, result.output[-3000:]
    assert {"run_store::test_unknown_run_reads_as_empty_log": "passed"} == {
        k: v.outcome for k, v in result.tests.items()
    }


def test_undeclared_missing_reopen_is_reported_not_silent(tmp_path: Path) -> None:
    """A store without polyloop_store_reopen and no declaration: durability rules skip, named."""
    project = _project(tmp_path, {"conftest.py": MEMORY_CONFTEST})
    result = run_contract(project, "--polyloop-contract", "-k", "reopen")
    skipped = {k: v.message for k, v in result.tests.items() if v.outcome == "skipped"}
    assert {
        "run_store::test_prefix_durability_across_reopen",
        "run_store::test_appends_continue_after_reopen",
    } == set(skipped)
    for message in skipped.values():
        assert "polyloop_store_reopen" in message
        assert "StoreCapabilities(off={'reopen'" in message


def test_fixtures_from_a_plugin_module_are_used(tmp_path: Path) -> None:
    """Fixtures that come from a plugin (-p), not a conftest, still reach the suites."""
    project = _project(tmp_path, {"my_fixtures.py": MEMORY_CONFTEST})
    result = run_contract(
        project,
        "--polyloop-contract",
        "-p",
        "my_fixtures",
        "-k",
        "run_store and not stateful",
        env={"PYTHONPATH": str(project)},
    )
    assert 0 == result.returncode, result.output[-3000:]
    passed = [k for k, v in result.tests.items() if v.outcome == "passed"]
    assert len(passed) >= 15


def test_two_directories_check_two_implementations(tmp_path: Path) -> None:
    """Each directory whose conftest defines polyloop_* fixtures gets its own copy of the suites."""
    project = _project(tmp_path, {})
    for name in ("first", "second"):
        (project / name).mkdir()
        (project / name / "conftest.py").write_text(MEMORY_CONFTEST)
    result = run_contract(project, "--polyloop-contract", "-k", "unknown_run_reads", "-v")
    assert 0 == result.returncode, result.output[-3000:]
    for name in ("first", "second"):
        line = f"{name}::polyloop-contract::run_store::test_unknown_run_reads_as_empty_log PASSED"
        assert line in result.output


def test_capabilities_need_known_names_and_reasons() -> None:
    """Declaring a capability off needs a known capability name and a reason."""
    assert not StoreCapabilities(off={"reopen": "memory only"}).has("reopen")
    assert StoreCapabilities().has("exotic_run_ids")
    with pytest.raises(ValueError, match="unknown capability"):
        StoreCapabilities(off={"teleport": "no"})
    with pytest.raises(ValueError, match="without a reason"):
        StoreCapabilities(off={"reopen": " "})


RAISING_CONFTEST = """\
import pytest
from polyloop.stores.memory import MemoryRunStore


class Unreachable(MemoryRunStore):
    async def read_log(self, run_id):
        raise ConnectionError("database is unreachable")


@pytest.fixture
def polyloop_store_factory():
    return Unreachable
"""


def test_failure_report_shows_the_rule_and_the_implementations_traceback(tmp_path: Path) -> None:
    """A failed rule reports its message first, then the implementation's frames, not the kit's."""
    project = _project(tmp_path, {"conftest.py": RAISING_CONFTEST})
    result = run_contract(project, "--polyloop-contract", "-k", "unknown_run_reads_as_empty")
    assert 1 == result.returncode
    outcome = result.tests["run_store::test_unknown_run_reads_as_empty_log"]
    assert outcome.message.startswith(
        "RunStore rule 'unknown run reads as empty': read_log('never-written') on a fresh store "
        "raised ConnectionError: database is unreachable"
    )
    assert "raised by the implementation under test:" in result.output
    assert 'conftest.py", line 7, in read_log' in result.output
    assert "_checks.py" not in result.output
    assert "asyncio/tasks.py" not in result.output


def test_the_kit_overrides_no_private_pytest_hook() -> None:
    """The kit's collectors define no `_name` of pytest's (such as `_getobj`): a pytest upgrade
    that changes its internals cannot silently change how the kit loads its suites."""
    from polyloop_contract._collect import ContractKit, SuiteModule

    for collector, base in ((SuiteModule, pytest.Module), (ContractKit, pytest.Collector)):
        private = [
            name
            for name in vars(collector)
            if name.startswith("_")
            and not name.startswith("__")
            and name != "_abc_impl"  # set by ABCMeta on every subclass
            and hasattr(base, name)
        ]
        assert [] == private, f"{collector.__name__} overrides pytest internals {private}"
