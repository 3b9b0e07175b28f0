"""Helpers of the console's tests: a real ``polyloop serve`` (or ``worker``) process on a
loopback port, runs started on a real SQLite store, and signed-in HTTP clients."""

from __future__ import annotations

import contextlib
import json
import re
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from polyloop.asking import RunParked
from polyloop.session import run_or_park
from polyloop.stores.sqlite import SqliteRunStore
from tests.cli._kit import POLYLOOP, clean_env
from tests.console._agents import build

ROOT = Path(__file__).resolve().parents[2]
AGENT = "tests.console._agents:agent"
#: How long a server or a background resume may take on a loaded 2-core machine.
DEADLINE = 90.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Served:
    """A running ``polyloop serve``: its base URL, the token it printed, its output files."""

    process: subprocess.Popen[bytes]
    base: str
    token: str | None
    stdout: Path
    stderr: Path

    def audit(self) -> str:
        return self.stderr.read_text(encoding="utf-8")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def wait_for(condition, what: str, deadline: float = DEADLINE):  # type: ignore[no-untyped-def]
    """Poll ``condition`` until it returns a truthy value (returned), or fail naming ``what``."""
    end = time.monotonic() + deadline
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _url(store: Path | str) -> str:
    return store if isinstance(store, str) else f"sqlite:{store}"


def serve(home: Path, store: Path | str | None, *options: str, name: str = "serve") -> Served:
    """``polyloop serve --store sqlite:STORE --port N OPTIONS`` (a ``str`` is a store URL as
    is; no ``--store`` when ``store`` is ``None``: the demo's store in ``home``), with ``POLYLOOP_HOME=home``, running from the
    repository root (so ``--agent tests.console._agents:agent`` imports), until it accepts
    connections."""
    port = free_port()
    out, err = home / f"{name}-{port}.out", home / f"{name}-{port}.err"
    home.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [
                POLYLOOP,
                "serve",
                *(() if store is None else ("--store", _url(store))),
                "--port",
                str(port),
                *options,
            ],
            cwd=ROOT,
            env=clean_env(home),
            stdout=stdout,
            stderr=stderr,
        )

    def ready() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"serve exited {process.returncode}: {err.read_text()}")
        if "PolyLoop console for" not in out.read_text(encoding="utf-8"):
            return False
        with socket.socket() as probe:
            return probe.connect_ex(("127.0.0.1", port)) == 0

    wait_for(ready, "the console to listen")
    printed = re.search(r"shown once:\n  (\S+)\n", out.read_text(encoding="utf-8"))
    return Served(process, f"http://127.0.0.1:{port}", printed and printed.group(1), out, err)


def episode(ledger: Path, script: Sequence[str], hang_on: str = "") -> str:
    data: dict[str, object] = {"ledger": str(ledger), "script": list(script)}
    if hang_on:
        data["hang_on"] = hang_on
    return json.dumps(data)


async def park(store: Path, run_id: str, ledger: Path, script: Sequence[str]) -> RunParked:
    """Start ``run_id`` with the tests' agent until it parks on its first ask."""
    async with SqliteRunStore(store) as opened:
        outcome = await run_or_park(*build(run_id, opened, str(ledger), script))
    assert isinstance(outcome, RunParked), outcome
    return outcome


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text(encoding="utf-8").split() if ledger.exists() else []


def csrf_of(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, page[:500]
    return found.group(1)


@contextlib.contextmanager
def signed_in(served: Served, token: str | None = None) -> Iterator[httpx.Client]:
    """A client signed in with ``token`` (default: the printed one), posting from the
    console's own origin."""
    with httpx.Client(base_url=served.base, headers={"Origin": served.base}, timeout=30) as client:
        answer = client.post("/login", data={"token": token or served.token or ""})
        assert 303 == answer.status_code, answer.text
        yield client
