"""Print the path of the pinned uv, installing it first if it is not there yet.

Standard library only, so that any ``python3`` can run it: Debian's own (no pip, and pip would
refuse to install into it anyway), a pyenv interpreter, a fresh virtual environment. Nothing is
installed into the Python that runs it. uv's wheel is downloaded from the package index (the
PEP 691 JSON page of the ``uv`` project, or the PEP 503 HTML page where an index offers only
that), checked against the SHA-256 pinned below, and its ``uv`` binary unpacked to

    ${XDG_CACHE_HOME:-$HOME/.cache}/polyloop/uv-<version>-<system>-<machine>[-<libc>]/uv

The directory appears in one rename, so a second run (or a run racing this one) either sees a
complete install or none; once it is there, nothing is downloaded again (a run works offline).

Environment: ``POLYLOOP_UV`` names a uv to use instead (nothing is downloaded or checked);
``UV_DEFAULT_INDEX``, ``UV_INDEX_URL`` or ``PIP_INDEX_URL`` (first set wins) name the index,
default ``https://pypi.org/simple``. Exit status 0 with the path on stdout, else 1 with one
line on stderr saying what to do.
"""

from __future__ import annotations

import hashlib
import html.parser
import json
import os
import platform
import pwd
import shutil
import stat
import sys
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from typing import Any

VERSION = "0.13.9"

#: sha256 of the uv wheel per (system, machine, libc), copied from the index when pinning.
WHEELS = {
    ("Linux", "x86_64", "glibc"): (
        "manylinux_2_17_x86_64.manylinux2014_x86_64",
        "d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19",
    ),
    ("Linux", "x86_64", "musl"): (
        "musllinux_1_1_x86_64",
        "2c45530751517d6c3bbc69a19473f6effe47cce047bede01ffd8af7ea7b36b25",
    ),
    ("Linux", "aarch64", "glibc"): (
        "manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64",
        "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    ),
    ("Linux", "aarch64", "musl"): (
        "manylinux_2_17_aarch64.manylinux2014_aarch64.musllinux_1_1_aarch64",
        "5435c5ce14a56431208ca0996416d310f1598e8c2c8ba707688985a16bb82dbe",
    ),
    ("Darwin", "x86_64", ""): (
        "macosx_10_12_x86_64",
        "c16ed11e013557536b3e60065f1b912f6407bd6518e041b961e23ef9e6b4fbf5",
    ),
    ("Darwin", "arm64", ""): (
        "macosx_11_0_arm64",
        "66c512266d633bef48384a1f53003f41f2a8e7b36fe6e7fbfd3e0fd52d96fa63",
    ),
}

DEFAULT_INDEX = "https://pypi.org/simple"
TIMEOUT_SECONDS = 60
ADVICE = f"install uv {VERSION} yourself and set POLYLOOP_UV to its path"


class BootstrapError(Exception):
    """A failure the user can act on; its message is the one line printed."""


def cache_root() -> str:
    """``$XDG_CACHE_HOME``, else ``$HOME/.cache``, else the account's home from the password
    database (``HOME`` may be unset or empty, as under ``env -i``)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    if os.path.isabs(xdg):
        return xdg
    home = os.environ.get("HOME", "")
    if not os.path.isabs(home):
        try:
            home = pwd.getpwuid(os.getuid()).pw_dir
        except KeyError:
            home = ""
    if not os.path.isabs(home):
        raise BootstrapError(
            "no cache directory for uv: HOME is unset and the account has no home; set "
            "XDG_CACHE_HOME to a writable directory"
        )
    return os.path.join(home, ".cache")


def platform_key() -> tuple[str, str, str]:
    system, machine = platform.system(), platform.machine()
    machine = {"amd64": "x86_64", "arm64": "arm64" if system == "Darwin" else "aarch64"}.get(
        machine.lower(), machine
    )
    libc = ""
    if system == "Linux":
        libc = "glibc" if platform.libc_ver()[0] == "glibc" else "musl"
    return system, machine, libc


def index_url() -> str:
    for name in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        value = os.environ.get(name, "").strip()
        if value:
            return value.rstrip("/")
    return DEFAULT_INDEX


class _Anchors(html.parser.HTMLParser):
    """The ``href`` of every anchor of a PEP 503 page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(value for name, value in attrs if name == "href" and value)


def _open(url: str) -> Any:
    request = urllib.request.Request(
        url,
        headers={
            "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1",
            "User-Agent": "polyloop-bootstrap-uv",
        },
    )
    return urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS)


def wheel_url(index: str, filename: str) -> str:
    """The URL of ``filename`` as listed on the index's page of the ``uv`` project."""
    page = index + "/uv/"
    try:
        with _open(page) as response:
            body = response.read()
            kind = response.headers.get("Content-Type", "")
    except (OSError, urllib.error.URLError) as error:
        raise BootstrapError(
            f"cannot download uv {VERSION} from {index} ({getattr(error, 'reason', error)}); "
            f"check the network or set UV_DEFAULT_INDEX to a reachable mirror, or {ADVICE}"
        ) from None
    if "json" in kind:
        links = [item["url"] for item in json.loads(body)["files"] if item["filename"] == filename]
    else:
        anchors = _Anchors()
        anchors.feed(body.decode("utf-8", "replace"))
        links = [href for href in anchors.hrefs if href.split("#")[0].endswith("/" + filename)]
    if not links:
        raise BootstrapError(
            f"the index {index} does not list {filename}; point UV_DEFAULT_INDEX at an index "
            f"that mirrors PyPI, or {ADVICE}"
        )
    return urllib.parse.urljoin(page, links[0].split("#")[0])


def download(url: str, target: str, expected_sha256: str) -> None:
    digest = hashlib.sha256()
    try:
        with _open(url) as response, open(target, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (OSError, urllib.error.URLError) as error:
        raise BootstrapError(
            f"downloading {url} failed ({getattr(error, 'reason', error)}); check the network "
            f"and rerun, or {ADVICE}"
        ) from None
    if digest.hexdigest() != expected_sha256:
        raise BootstrapError(
            f"refusing the uv wheel from {url}: its sha256 is {digest.hexdigest()}, not the "
            f"pinned {expected_sha256}; check which index you use (UV_DEFAULT_INDEX), or {ADVICE}"
        )


def unpack(wheel: str, directory: str) -> None:
    member = f"uv-{VERSION}.data/scripts/uv"
    path = os.path.join(directory, "uv")
    with zipfile.ZipFile(wheel) as archive, archive.open(member) as source, open(path, "wb") as out:
        shutil.copyfileobj(source, out)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def install() -> str:
    key = platform_key()
    if key not in WHEELS:
        raise BootstrapError(f"no uv wheel is pinned for {'/'.join(key)}; {ADVICE}")
    tag, sha256 = WHEELS[key]
    parent = os.path.join(cache_root(), "polyloop")
    final = os.path.join(parent, f"uv-{VERSION}-{'-'.join(part for part in key if part).lower()}")
    binary = os.path.join(final, "uv")
    if os.access(binary, os.X_OK):
        return binary
    try:
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=".uv-", dir=parent)
    except OSError as error:
        raise BootstrapError(
            f"cannot create {parent} ({error.strerror}); set XDG_CACHE_HOME to a writable directory"
        ) from None
    try:
        filename = f"uv-{VERSION}-py3-none-{tag}.whl"
        wheel = os.path.join(staging, filename)
        download(wheel_url(index_url(), filename), wheel, sha256)
        unpack(wheel, staging)
        os.remove(wheel)
        os.chmod(staging, 0o755)  # mkdtemp made it private; the install is not secret
        try:
            os.rename(staging, final)
        except OSError:
            if not os.access(binary, os.X_OK):
                raise
            # Another run installed the same uv first: use that one.
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return binary


def main() -> int:
    explicit = os.environ.get("POLYLOOP_UV", "")
    try:
        if explicit:
            if not os.access(explicit, os.X_OK):
                raise BootstrapError(
                    f"POLYLOOP_UV={explicit} is not an executable file; unset it to use the "
                    f"pinned uv {VERSION}, or point it at a uv binary"
                )
            path = explicit
        else:
            path = install()
    except BootstrapError as error:
        sys.stderr.write(f"bootstrap-uv: {error}\n")
        return 1
    sys.stdout.write(path + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
