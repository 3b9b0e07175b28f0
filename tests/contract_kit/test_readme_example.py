"""The README's example conftest works when copied into an empty directory."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.contract_kit._runner import PYTEST_INI, REPO, run_contract

#: Each test here runs pytest in a subprocess.
pytestmark = pytest.mark.slow

README = REPO / "packages" / "polyloop-contract" / "README.md"


def example_conftest() -> str:
    """The Python block right after the ``<!-- example-conftest -->`` marker of the README."""
    match = re.search(r"<!-- example-conftest -->\s*```python\n(.*?)```", README.read_text(), re.S)
    assert match is not None, "the README lost its example conftest (or its marker)"
    return match.group(1)


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
