"""examples/gateway_example.py runs as documented (with its stand-in gateway on loopback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gateway_example.py"


def test_gateway_example_runs() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYLOOP_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "agent_finished 4 demo-1"
