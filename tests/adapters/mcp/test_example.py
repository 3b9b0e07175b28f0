"""examples/mcp_example.py runs as documented (its own MCP server process, scripted model)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: The example runs end to end in a process of its own, with a real MCP server.
pytestmark = pytest.mark.slow

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "mcp_example.py"


def test_mcp_example_runs() -> None:
    """The MCP example runs against its server and prints the expected trajectory."""
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        '0 CALL add_note {"text": "buy milk"} -> stored note 1',
        "1 CALL count_notes {} -> 1",
        "2 None -> ",
        "agent_finished 1 note",
    ]
