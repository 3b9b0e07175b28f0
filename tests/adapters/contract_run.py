"""Run one adapter's downstream-style contract conftest through the installed plugin."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.xdist_env import outside_xdist

ROOT = Path(__file__).resolve().parents[2]


def assert_contract_suite_passes(kit: Path, seam: str, rules: int) -> None:
    """`pytest <kit> --polyloop-contract` passes, with ``seam``'s suite run (not skipped)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(kit),
            "--polyloop-contract",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
        cwd=ROOT,
        env=outside_xdist(os.environ),
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "failed" not in summary
    assert "error" not in summary
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    assert int(passed.group(1)) >= rules, summary
    # None of the seam's rules was skipped for a missing fixture.
    assert f"{seam} suite not run" not in done.stdout
    assert f"{seam} (" not in done.stdout
