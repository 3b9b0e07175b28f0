"""The collectors that put the kit's suites into a pytest session.

The suites are ordinary modules of this package (``polyloop_contract.suites.*``). They are
imported by name, not by file path, so they work the same from a wheel, an editable install
or a zip, whatever ``--import-mode`` the downstream project uses, and they never put
site-packages on ``sys.path``. Their test functions are collected whatever the project's
``python_functions``/``python_classes`` settings say.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

import pytest

#: The suites, in the order they run: one module each, named after the seam it checks.
SUITES: tuple[str, ...] = (
    "run_store",
    "run_store_stateful",
    "decision_parser",
    "model_client",
    "action_executor",
    "event_sink",
)


class SuiteModule(pytest.Module):
    """One suite module, imported by its dotted name."""

    def _getobj(self) -> ModuleType:
        return importlib.import_module(f"polyloop_contract.suites.{self.name}")

    def funcnamefilter(self, name: str) -> bool:
        return name.startswith("test_")

    def classnamefilter(self, name: str) -> bool:
        return name.startswith("Test")


class ContractKit(pytest.Collector):
    """All suites, attached where the implementation's fixtures are visible."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        for name in SUITES:
            module = importlib.import_module(f"polyloop_contract.suites.{name}")
            path = Path(module.__file__ or name)
            yield SuiteModule.from_parent(
                self, path=path, name=name, nodeid=f"{self.nodeid}::{name}"
            )
