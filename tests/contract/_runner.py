"""Run ``pytest --polyloop-contract`` in a separate process, as a downstream project would."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from tests.xdist_env import outside_xdist

REPO = Path(__file__).resolve().parents[2]

#: The pytest settings of the throwaway projects: strict asyncio mode (the kit must not rely on
#: a project's auto mode) and warnings as errors.
PYTEST_INI = """\
[pytest]
asyncio_mode = strict
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


@dataclass(frozen=True)
class Outcome:
    outcome: str  # "passed", "failed", "skipped", "error"
    message: str


@dataclass(frozen=True)
class Result:
    returncode: int
    output: str
    #: Keyed by "<suite module>::<test name with parameters>", e.g. "run_store::test_x[memory]".
    tests: dict[str, Outcome]

    def failed(self) -> dict[str, Outcome]:
        return {k: v for k, v in self.tests.items() if v.outcome in ("failed", "error")}


def _parse_junit(path: Path) -> dict[str, Outcome]:
    tests: dict[str, Outcome] = {}
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        suite = case.get("classname", "").rsplit(".", 1)[-1]
        key = f"{suite}::{case.get('name', '')}"
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = "failed" if tag == "failure" else tag
                message = (element.get("message") or "") + "\n" + (element.text or "")
                break
        tests[key] = Outcome(outcome, message)
    return tests


def run_contract(
    project: Path,
    *args: str,
    env: dict[str, str] | None = None,
    report: Path | None = None,
    timeout: float = 280,
) -> Result:
    """Run pytest with ``args`` from ``project`` in a fresh interpreter; parse its JUnit report.

    The plugin is found through its installed entry point, as in a downstream project.
    """
    report = report or project / "junit.xml"
    environment = outside_xdist(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPO), *filter(None, [environment.get("PYTHONPATH")])]
    )
    environment.pop("PYTEST_ADDOPTS", None)
    environment.update(env or {})
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            "-ra",
            *args,
        ],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = completed.stdout + completed.stderr
    tests = _parse_junit(report) if report.exists() else {}
    return Result(completed.returncode, output, tests)
