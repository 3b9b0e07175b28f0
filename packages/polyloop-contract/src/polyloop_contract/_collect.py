"""The collectors that put the kit's suites into a pytest session.

The suites are ordinary modules of this package (``polyloop_contract.suites.*``). They are
imported by name, not by file path, so they work the same from a wheel, an editable install
or a zip, whatever ``--import-mode`` the downstream project uses, and they never put
site-packages on ``sys.path``. Their test functions are collected whatever the project's
``python_functions``/``python_classes`` settings say.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The suites, in the order they run: one module each, named after the seam it checks.
SUITES: tuple[str, ...] = (
    "run_store",
    "run_store_leases",
    "run_store_user_asking",
    "run_store_record_batching",
    "run_store_stateful",
    "decision_parser",
    "model_client",
    "action_executor",
    "event_sink",
)


class SuiteModule(pytest.Module):
    """One suite module, loaded by its dotted name.

    Each node gets a module object of its own, executed from the installed suite: pytest 8
    registers the fixtures of a given module object only once, so a kit attached under two
    directories would otherwise find its own helper fixtures missing in the second. The module
    is handed to the node through pytest's public ``obj`` property (``for_suite``), never by
    overriding pytest's private hooks, so a pytest upgrade cannot silently change how it loads.
    """

    @classmethod
    def for_suite(cls, parent: pytest.Collector, name: str) -> SuiteModule:
        dotted = f"polyloop_contract.suites.{name}"
        spec = importlib.util.find_spec(dotted)
        if spec is None or spec.loader is None or spec.origin is None:
            raise ImportError(f"polyloop-contract: suite module {dotted} is not installed")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        node = cls.from_parent(
            parent, path=Path(spec.origin), name=name, nodeid=f"{parent.nodeid}::{name}"
        )
        node.obj = module
        marks = getattr(module, "pytestmark", [])
        for mark in marks if isinstance(marks, list) else [marks]:
            node.add_marker(mark)
        return node

    def funcnamefilter(self, name: str) -> bool:
        return name.startswith("test_")

    def classnamefilter(self, name: str) -> bool:
        return name.startswith("Test")


class ContractKit(pytest.Collector):
    """All suites, attached where the implementation's fixtures are visible."""

    @classmethod
    def attach(cls, parent: pytest.Session | pytest.Collector) -> ContractKit:
        """The kit under ``parent``; at the top of the tree its id is plain ``polyloop-contract``."""
        base = parent.nodeid
        nodeid = "polyloop-contract" if base in ("", ".") else f"{base}::polyloop-contract"
        return cls.from_parent(parent, name="polyloop-contract", nodeid=nodeid)

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        for name in SUITES:
            yield SuiteModule.for_suite(self, name)


_HIDDEN_DIRECTORIES = (
    str(Path(__file__).parent),
    str(Path(asyncio.__file__).parent),
)


def _format_outside_kit(error: BaseException) -> str:
    """The traceback of ``error`` without the frames of the kit and of asyncio; long lines cut."""
    from polyloop_contract._checks import clipped

    summary = traceback.TracebackException.from_exception(error)
    frames = [f for f in summary.stack if not f.filename.startswith(_HIDDEN_DIRECTORIES)]
    summary.stack = traceback.StackSummary.from_list(frames)
    text = "".join(summary.format()).rstrip()
    return "\n".join(clipped(line, 500) for line in text.splitlines())


@dataclass(frozen=True)
class _Crash:
    """Where and what, for pytest's one-line summaries (``-ra``, ``--tb=line``, JUnit)."""

    path: str
    lineno: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.lineno}: {self.message}"


class ShortFailure:
    """The report of a failed kit rule: its message first, then what helps to fix it."""

    def __init__(self, text: str, crash: _Crash) -> None:
        self.text = text
        self.reprcrash = crash

    def toterminal(self, out: Any) -> None:
        for number, line in enumerate(self.text.splitlines()):
            out.line(line, red=number == 0, bold=number == 0)

    def __str__(self) -> str:
        return self.text


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for inner in group.exceptions:
        found += _leaves(inner) if isinstance(inner, BaseExceptionGroup) else [inner]
    return found


def _explained(error: BaseException) -> list[str]:
    """One failure in words: the rule's message (or the exception), hypothesis' notes, and the
    traceback of what the implementation under test raised."""
    from polyloop_contract._checks import ContractViolation, clipped

    if isinstance(error, ContractViolation):
        parts = [str(error)]
        cause = error.__cause__
    else:
        parts = [clipped(f"{type(error).__name__}: {error}", 500)]
        cause = error
    parts += [str(note) for note in getattr(error, "__notes__", ())]
    if cause is not None:
        parts.append("raised by the implementation under test:")
        parts.append(_format_outside_kit(cause))
    return parts


def _headline(error: BaseException) -> str:
    """The start of one failure's first line, for the summary line of several."""
    text = str(error).split("\n", 1)[0] or type(error).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def short_failure(item: pytest.Item, error: BaseException) -> ShortFailure | None:
    """The report of a kit rule that failed: the rule's message, not the kit's traceback.

    Hypothesis notes (the falsifying example) are kept, and so is the traceback of an exception
    raised by the implementation under test, which is the code the reader has to fix. When
    hypothesis found several distinct failures, each is reported under its own rule, and the
    first line (what ``-ra`` and JUnit show) names every one of them.
    """
    from polyloop_contract._checks import ContractViolation

    if not isinstance(item.parent, SuiteModule):
        return None
    if isinstance(error, ContractViolation):
        failures: list[BaseException] = [error]
    elif isinstance(error, BaseExceptionGroup):
        failures = _leaves(error)
        if not any(isinstance(failure, ContractViolation) for failure in failures):
            return None
    else:
        return None
    if len(failures) == 1:
        parts = _explained(failures[0])
        crash = str(failures[0])
    else:
        crash = f"{len(failures)} distinct failures: " + " | ".join(
            _headline(failure) for failure in failures
        )
        parts = [crash]
        for number, failure in enumerate(failures, start=1):
            parts.append(f"--- failure {number} of {len(failures)} ---")
            parts += _explained(failure)
    module = item.parent.name
    parts.append(f"(rule checked by polyloop_contract.suites.{module}.{item.name.split('[')[0]})")
    path, lineno, _ = item.location
    return ShortFailure("\n".join(parts), _Crash(path, (lineno or 0) + 1, crash))
