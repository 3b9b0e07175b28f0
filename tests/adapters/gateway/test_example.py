"""examples/gateway_example.py runs as documented (with its stand-in gateway on loopback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.adapters.gateway._server import closed_port

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "gateway_example.py"


def run_example(**variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYLOOP_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**env, **variables},
    )


def test_gateway_example_runs() -> None:
    """With no gateway configured, the example runs against its stand-in and prints the result."""
    done = run_example()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "agent_finished 4 demo-1"


def test_gateway_example_against_an_unreachable_gateway_says_what_failed() -> None:
    """Pointed at a closed port, the example prints the connection failure and exits 1."""
    done = run_example(
        POLYLOOP_GATEWAY_URL=f"http://127.0.0.1:{closed_port()}/v1", POLYLOOP_MODEL="nobody-home"
    )
    assert (1, "") == (done.returncode, done.stdout)
    assert "The model call failed: GatewayConnectionError: Could not connect" in done.stderr
