"""The README's examples work when copied into an empty directory."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from polyloop.serialization import loads
from polyloop.types import RunResult
from polyloop_contract.snapshot import run_log_from_json
from tests.contract_kit._runner import PYTEST_INI, REPO, run_contract

#: Each test here runs pytest in a subprocess.
pytestmark = pytest.mark.slow

README = REPO / "packages" / "polyloop-contract" / "README.md"


def readme_block(marker: str) -> str:
    """The Python block right after the ``<!-- {marker} -->`` comment of the README."""
    pattern = rf"<!-- {re.escape(marker)} -->\s*```python\n(.*?)```"
    match = re.search(pattern, README.read_text(), re.S)
    assert match is not None, f"the README lost its {marker!r} block (or its marker)"
    return match.group(1)


def example_conftest() -> str:
    """The README's example conftest."""
    return readme_block("example-conftest")


def test_readme_example_passes_in_a_fresh_directory(tmp_path: Path) -> None:
    """Copied verbatim into a new project, the example runs every suite and passes."""
    (tmp_path / "conftest.py").write_text(example_conftest())
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)
    result = run_contract(tmp_path, "--polyloop-contract")
    assert 0 == result.returncode, result.output[-4000:]
    assert {} == {k: v.message[:300] for k, v in result.failed().items()}
    assert "suite not run" not in result.output
    suites = {key.split("::")[0] for key, v in result.tests.items() if v.outcome == "passed"}
    assert {
        "run_store",
        "run_store_leases",
        "run_store_user_asking",
        "run_store_record_batching",
        "run_store_stateful",
        "decision_parser",
        "model_client",
        "action_executor",
        "event_sink",
    } == suites
    assert "the logs live in the store object" in result.output


def test_readme_snapshot_example_passes_twice_then_names_a_changed_observation(
    tmp_path: Path,
) -> None:
    """The README's snapshot example, in a new project: the first run writes the snapshots (in
    the library's JSON), the next two pass against them although the tool's duration varies, and a
    changed observation fails naming the step and the field."""
    agent, test = tmp_path / "agent.py", tmp_path / "test_trajectory.py"
    agent.write_text(readme_block("snapshot-example: agent.py"))
    test.write_text(readme_block("snapshot-example: test_trajectory.py"))
    (tmp_path / "pytest.ini").write_text(PYTEST_INI)

    first = run_contract(tmp_path, "--snapshot-update")
    assert 0 == first.returncode, first.output[-4000:]
    assert "2 snapshots generated" in first.output
    snapshots = tmp_path / "__snapshots__" / "test_trajectory"
    result = loads(RunResult, (snapshots / "test_order_lookup.json").read_text())
    assert [1, 1] == [step.step_wall_ms for step in result.steps]
    assert "shipped on Monday" == result.steps[0].observation
    log = run_log_from_json((snapshots / "test_order_lookup.1.json").read_text())
    assert log.finished is not None
    assert result == log.finished.result

    for _ in range(2):
        again = run_contract(tmp_path)
        assert 0 == again.returncode, again.output[-4000:]
        assert "2 snapshots passed" in again.output

    agent.write_text(agent.read_text().replace("shipped on Monday", "lost in transit"))
    changed = run_contract(tmp_path)
    assert 1 == changed.returncode, changed.output[-4000:]
    assert "step 0 · observation: 'shipped on Monday' → 'lost in transit'" in changed.output


def readme_ini() -> str:
    """The pytest configuration block of the README's notes (indented in its list item)."""
    match = re.search(r"<!-- pytest-ini -->\s*```ini\n(.*?)```", README.read_text(), re.S)
    assert match is not None, "the README lost its 'pytest-ini' block (or its marker)"
    return "\n".join(line.strip() for line in match.group(1).splitlines()) + "\n"


def test_readme_cleanup_example_passes_and_its_ini_silences_pytest_asyncio(
    tmp_path: Path,
) -> None:
    """The README's cleaning-up example passes every store rule under the README's pytest
    configuration with warnings as errors; without that configuration pytest-asyncio's
    warning about the unset fixture loop scope stops the same run."""
    (tmp_path / "conftest.py").write_text(readme_block("cleanup-example"))
    (tmp_path / "pytest.ini").write_text(
        readme_ini() + "asyncio_mode = strict\nfilterwarnings = error\n"
    )
    result = run_contract(tmp_path, "--polyloop-contract", "-k", "run_store")
    assert 0 == result.returncode, result.output[-4000:]
    assert {} == {k: v.message[:300] for k, v in result.failed().items()}
    stores = [k for k, v in result.tests.items() if v.outcome == "passed"]
    assert len(stores) >= 35
    assert [] == list(tmp_path.glob("**/runs-*.sqlite3"))

    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_mode = strict\nfilterwarnings = error\n"
    )
    unset = run_contract(tmp_path, "--polyloop-contract", "-k", "unknown_run_reads_as_empty")
    assert 0 != unset.returncode
    assert "asyncio_default_fixture_loop_scope" in unset.output


#: The errors the README tells a store to raise, with the class each one must derive from.
DOCUMENTED_ERRORS = {
    "polyloop.errors.RunAlreadyStartedError": "polyloop.errors.DuplicateRecordError",
    "polyloop.errors.DuplicateRecordError": "polyloop.errors.StoreError",
    "polyloop.errors.RunLeaseHeldError": "polyloop.errors.PolyLoopError",
}


def _resolve(dotted: str) -> type:
    module, _, name = dotted.rpartition(".")
    found = getattr(importlib.import_module(module), name)
    assert isinstance(found, type)
    return found


def test_readme_names_the_errors_a_store_raises_where_they_are_imported_from() -> None:
    """The README says which error a second RunStarted/RunFinished and other duplicates must
    raise, by import path; each path resolves and the classes derive as the README says."""
    text = " ".join(README.read_text().split())
    assert (
        "| a second `RunStarted` for a run_id, or a second `RunFinished` | "
        "`polyloop.errors.RunAlreadyStartedError` |" in text
    )
    assert "`polyloop.errors.DuplicateRecordError` (or keep both records" in text
    assert (
        "`RunAlreadyStartedError` is a subclass of `DuplicateRecordError`, which is a "
        "`polyloop.errors.StoreError`" in text
    )
    for dotted, base in DOCUMENTED_ERRORS.items():
        assert f"`{dotted}`" in text
        assert issubclass(_resolve(dotted), _resolve(base))
