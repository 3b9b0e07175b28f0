"""GatewayModelClient passes the polyloop-contract ModelClient suite, run exactly as a downstream project
runs it: `pytest <dir> --polyloop-contract` over a conftest providing the fixtures."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

KIT = Path(__file__).with_name("contract_kit")
ROOT = Path(__file__).resolve().parents[3]


def test_the_model_client_contract_suite_passes() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            str(KIT),
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
    )
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "failed" not in summary
    assert "error" not in summary
    passed = re.search(r"(\d+) passed", summary)
    assert passed is not None, summary
    # The ModelClient suite has six rules; none of them was skipped for a missing fixture.
    assert int(passed.group(1)) >= 6, summary
    assert "ModelClient suite not run" not in done.stdout
    assert "ModelClient (" not in done.stdout
