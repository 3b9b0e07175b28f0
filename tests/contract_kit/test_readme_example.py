"""The README's examples work when copied into an empty directory."""

from __future__ import annotations

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
