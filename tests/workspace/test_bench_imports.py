"""Every module a benchmark in ``bench/`` imports from the project (``polyloop*`` and the test
kits under ``tests``) exists, with every name it takes from it.

The benchmarks are run by hand, not by the suite, so a module moved or renamed (the CLI's
regrouping by job, design 0074) would otherwise break one silently until someone measures.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHES = sorted((ROOT / "bench").glob("*.py"))
_PROJECT = ("polyloop", "polyloop_cli", "polyloop_console", "polyloop_contract", "tests")


def _project_imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names taken from it) of each project import in the file, at any depth."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in _PROJECT:
                found.append((node.module, tuple(alias.name for alias in node.names)))
        elif isinstance(node, ast.Import):
            found += [
                (alias.name, ()) for alias in node.names if alias.name.split(".")[0] in _PROJECT
            ]
    return found


def test_there_are_benchmarks() -> None:
    assert len(BENCHES) >= 10


@pytest.mark.parametrize("path", BENCHES, ids=lambda path: path.name)
def test_a_benchmark_imports_only_what_exists(path: Path) -> None:
    missing = []
    for module_name, names in _project_imports(path):
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            missing.append(f"{module_name}: {error}")
            continue
        for name in names:
            if name != "*" and not hasattr(module, name):
                try:
                    importlib.import_module(f"{module_name}.{name}")
                except ImportError:
                    missing.append(f"{module_name}.{name}")
    assert not missing, f"{path.name} imports what is not there: {missing}"
