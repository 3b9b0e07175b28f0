"""A real OTLP receiver for the sink's tests: Arize Phoenix on loopback, one per test session
(it takes about a minute to start), unless ``POLYLOOP_TEST_PHOENIX_URL`` names one."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "phoenix-test-server.sh"
URL_VARIABLE = "POLYLOOP_TEST_PHOENIX_URL"


@pytest.fixture(scope="session")
def phoenix_url() -> Iterator[str]:
    """The base URL of a running Phoenix (OTLP/HTTP at /v1/traces, REST API at /v1/...).
    Fails, never skips, when none can be started."""
    named = os.environ.get(URL_VARIABLE)
    if named:
        yield named.rstrip("/")
        return
    started = subprocess.run(
        ["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=900, check=False
    )
    assert started.returncode == 0, (
        f"could not start Phoenix with {SCRIPT.relative_to(ROOT)} (set {URL_VARIABLE} to use "
        f"a running one):\n{started.stderr[-3000:]}"
    )
    where = started.stdout.strip().splitlines()[-1]
    try:
        yield Path(where, "url").read_text(encoding="utf-8").strip()
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", where], check=False, timeout=60)
