"""scripts/bootstrap_uv.py: the pinned uv, installed privately with nothing but the standard library.

Run as a newcomer runs it: Debian's own /usr/bin/python3 under `env -i`, an empty HOME, no uv
on PATH. The index is PyPI itself for the real install, and a real loopback HTTP server for the
refusals (a wheel whose hash differs from the pinned one, in both index page formats).
"""

from __future__ import annotations

import hashlib
import http.server
import importlib.util
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "bootstrap_uv.py"
SYSTEM_PYTHON = Path("/usr/bin/python3")


def _bootstrap_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bootstrap_uv", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BOOTSTRAP = _bootstrap_module()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def newcomer(home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """The bootstrap under `env -i`: Debian's python3, an empty HOME, PATH without any uv."""
    assert SYSTEM_PYTHON.exists(), "these tests need Debian's own /usr/bin/python3"
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", **extra}
    return subprocess.run(
        [
            "env",
            "-i",
            *(f"{key}={value}" for key, value in env.items()),
            str(SYSTEM_PYTHON),
            str(SCRIPT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def dead_network(port: int) -> dict[str, str]:
    """Every HTTP(S) request through a proxy that refuses connections, and a dead index."""
    dead = f"http://127.0.0.1:{port}"
    return {"https_proxy": dead, "http_proxy": dead, "UV_DEFAULT_INDEX": f"{dead}/simple"}


@pytest.mark.slow
def test_the_first_run_installs_uv_under_the_cache_and_the_second_needs_no_network(
    tmp_path: Path,
) -> None:
    """With only Debian's python3 the pinned uv lands under $HOME/.cache/polyloop; a second run
    with the network dead prints the same path (nothing is downloaded again)."""
    home = tmp_path / "home"
    home.mkdir()
    first = newcomer(home)
    assert (0, "") == (first.returncode, first.stderr)
    path = Path(first.stdout.strip())
    assert home / ".cache" / "polyloop" in path.parents
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=True)
    assert f"uv {BOOTSTRAP.VERSION} " == version.stdout[: len(BOOTSTRAP.VERSION) + 4]
    second = newcomer(home, **dead_network(closed_port()))
    assert (0, first.stdout, "") == (second.returncode, second.stdout, second.stderr)
    assert [path.name] == [entry.name for entry in path.parent.iterdir()]


def test_without_the_pinned_uv_a_dead_index_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    """No network on the first run: exit 1 and one line naming the index and the way out."""
    result = newcomer(tmp_path, **dead_network(closed_port()))
    assert (1, "") == (result.returncode, result.stdout)
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        f"bootstrap-uv: cannot download uv {BOOTSTRAP.VERSION} from http://127.0.0.1:"
    )
    assert "POLYLOOP_UV" in line
    assert [] == list((tmp_path / ".cache" / "polyloop").iterdir())


class FakeIndex(http.server.BaseHTTPRequestHandler):
    """A package index whose uv page lists this platform's wheel with other bytes behind it."""

    page_format: ClassVar[str] = "json"
    filename: ClassVar[str] = ""
    body: ClassVar[bytes] = b"PK\x03\x04 not the uv wheel"

    def do_GET(self) -> None:
        if self.path == "/simple/uv/":
            href = f"/files/{self.filename}#sha256={hashlib.sha256(self.body).hexdigest()}"
            if self.page_format == "json":
                kind = "application/vnd.pypi.simple.v1+json"
                data = json.dumps({"files": [{"filename": self.filename, "url": href}]}).encode()
            else:
                kind = "text/html"
                data = f'<html><body><a href="{href}">{self.filename}</a></body></html>'.encode()
        elif self.path == f"/files/{self.filename}":
            kind, data = "application/octet-stream", self.body
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture(params=["json", "html"])
def fake_index(request: pytest.FixtureRequest) -> Iterator[str]:
    tag, _ = BOOTSTRAP.WHEELS[BOOTSTRAP.platform_key()]
    FakeIndex.filename = f"uv-{BOOTSTRAP.VERSION}-py3-none-{tag}.whl"
    FakeIndex.page_format = request.param
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_wheel_whose_sha256_is_not_the_pinned_one_is_refused(
    fake_index: str, tmp_path: Path
) -> None:
    """The index (JSON or HTML page) serves other bytes under uv's name: refused, nothing kept."""
    result = newcomer(tmp_path, UV_DEFAULT_INDEX=fake_index)
    assert (1, "") == (result.returncode, result.stdout)
    (line,) = result.stderr.splitlines()
    assert f"refusing the uv wheel from {fake_index.removesuffix('/simple')}/files/" in line
    assert [] == list((tmp_path / ".cache" / "polyloop").iterdir())
