"""Build a minimal Python root file system from this machine's own interpreter.

No registry is needed: the interpreter, the shared libraries it and its extension modules
link against, and its standard library (without tests, IDLE, Tk and pip's bootstrap) are copied
into a directory (for ``BubblewrapBackend(rootfs=...)``) or streamed as a tar into
``docker import`` (for ``DockerBackend``).
"""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from polyloop.adapters.container._backends import DEFAULT_DOCKER_IMAGE
from polyloop.adapters.container._errors import BackendUnavailableError, ImageBuildError

__all__ = ["IMAGE_FORMAT", "build_rootfs", "ensure_docker_image"]

#: Label value of images built by this version of ``ensure_docker_image``; an image with another
#: value under the same tag (built by an older version) is rebuilt.
IMAGE_FORMAT = "python-rootfs-2"

_SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "__pycache__",
    "site-packages",
    "dist-packages",
}


def _run_python(python: str, code: str) -> str:
    done = subprocess.run(
        [python, "-I", "-c", code], capture_output=True, text=True, check=False, timeout=60
    )
    if done.returncode != 0:
        raise ImageBuildError(
            f"Cannot run {python} to find its standard library ({done.stderr.strip()[:300]}); "
            "pass source_python= an interpreter that runs on this machine."
        )
    return done.stdout.strip()


def _libraries(paths: list[Path]) -> set[Path]:
    """The shared libraries ``paths`` load, as reported by ldd."""
    found: set[Path] = set()
    ldd = shutil.which("ldd")
    if ldd is None:
        raise ImageBuildError("ldd is missing (Debian: libc-bin); it is needed to find libraries.")
    for path in paths:
        done = subprocess.run([ldd, str(path)], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            for word in line.split():
                if word.startswith("/"):
                    found.add(Path(word))
    return found


def build_rootfs(
    destination: str | os.PathLike[str], source_python: str = "/usr/bin/python3"
) -> Path:
    """Copy ``source_python`` and what it needs into ``destination`` (created; must not exist).

    The interpreter lands at the same absolute path inside (``/usr/bin/python3`` by default);
    ``/bin``, ``/lib`` and ``/lib64`` are symlinks into ``/usr`` as on a merged-/usr system.
    """
    root = Path(destination)
    if root.exists():
        raise ImageBuildError(f"{root} exists; build_rootfs wants a new directory.")
    python = Path(source_python)
    if not python.is_absolute():
        raise ImageBuildError(f"source_python must be an absolute path, got {source_python!r}.")
    real = python.resolve()
    stdlib = Path(
        _run_python(str(python), "import sysconfig; print(sysconfig.get_paths()['stdlib'])")
    )
    dynload = (
        Path(
            _run_python(str(python), "import sysconfig; print(sysconfig.get_paths()['platstdlib'])")
        )
        / "lib-dynload"
    )
    root.mkdir(parents=True)
    for name in ("usr/bin", "usr/lib", "tmp", "scratch", "etc"):
        (root / name).mkdir(parents=True, exist_ok=True)

    def place(source: Path, target: Path | None = None) -> None:
        where = root / str(target or source).lstrip("/")
        where.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, where, follow_symlinks=True)

    place(real)
    # A POSIX shell, so that os.system and subprocess(shell=True) work inside.
    shell = Path("/usr/bin/dash") if Path("/usr/bin/dash").exists() else None
    if shell is not None:
        place(shell)
        (root / "usr/bin/sh").symlink_to("dash")
    if python != real:
        (root / str(python).lstrip("/")).symlink_to(
            real.name if python.parent == real.parent else real
        )
    shutil.copytree(
        stdlib,
        root / str(stdlib).lstrip("/"),
        symlinks=True,
        ignore=lambda _dir, names: [n for n in names if n in _SKIP_DIRS],
        dirs_exist_ok=True,
    )
    if dynload.is_dir() and not (root / str(dynload).lstrip("/")).exists():
        shutil.copytree(dynload, root / str(dynload).lstrip("/"), symlinks=True)
    extensions = [real, *sorted(dynload.glob("*.so"))] if dynload.is_dir() else [real]
    if shell is not None:
        extensions.append(shell)
    for library in _libraries(extensions):
        target = root / str(library).lstrip("/")
        if not target.exists():
            place(library)
    # Merged /usr: /lib, /lib64, /bin are links into /usr (copy what was found under /lib*).
    for name in ("bin", "lib", "lib64"):
        top = root / name
        usr = root / "usr" / name
        if top.is_dir() and not top.is_symlink():
            usr.mkdir(parents=True, exist_ok=True)
            for item in top.iterdir():
                target = usr / item.name
                if item.is_dir() and not item.is_symlink():
                    shutil.copytree(item, target, symlinks=True, dirs_exist_ok=True)
                elif not target.exists():
                    shutil.move(str(item), target)
            shutil.rmtree(top)
        if not top.exists():
            usr.mkdir(parents=True, exist_ok=True)
            top.symlink_to(f"usr/{name}")
    (root / "etc" / "passwd").write_text(
        "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/scratch:/usr/sbin/nologin\n"
    )
    (root / "etc" / "group").write_text("root:x:0:\nnogroup:x:65534:\n")
    return root


async def ensure_docker_image(
    tag: str = DEFAULT_DOCKER_IMAGE,
    *,
    source_python: str = "/usr/bin/python3",
    docker: str = "docker",
    rebuild: bool = False,
) -> str:
    """Make sure the Docker image ``tag`` exists; build it from this machine's Python if not.

    Returns the image id. Needs a running Docker Engine (:class:`BackendUnavailableError`
    otherwise).
    """
    path = shutil.which(docker)
    if path is None:
        raise BackendUnavailableError(
            f"The Docker client {docker!r} is not on PATH (Debian: `apt-get install docker.io`)."
        )
    if not rebuild:
        image_id, image_format = await _image_id(path, tag)
        if image_id and image_format in (IMAGE_FORMAT, None):
            return image_id
    with tempfile.TemporaryDirectory(prefix="polyloop-rootfs-") as scratch:
        root = await asyncio.to_thread(build_rootfs, Path(scratch) / "root", source_python)
        data = await asyncio.to_thread(_tar_bytes, root)
        proc = await asyncio.create_subprocess_exec(
            path,
            "import",
            "--change",
            f"LABEL io.polyloop.image={IMAGE_FORMAT}",
            "-",
            tag,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await proc.communicate(data)
    if proc.returncode != 0:
        raise BackendUnavailableError(
            f"`docker import` of the Python root file system failed (exit {proc.returncode}): "
            f"{err.decode(errors='replace').strip()[:400]}. Is the Docker Engine running?"
        )
    return out.decode().strip()


def _tar_bytes(root: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for item in sorted(root.iterdir()):
            tar.add(item, arcname=item.name)
    return buffer.getvalue()


async def _image_id(docker: str, tag: str) -> tuple[str, str | None]:
    """The image's id and its ``io.polyloop.image`` label (``None``: not built by us)."""
    proc = await asyncio.create_subprocess_exec(
        docker,
        "image",
        "inspect",
        "--format",
        '{{.Id}} {{index .Config.Labels "io.polyloop.image"}}',
        tag,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        return "", None
    image_id, _, label = out.decode().strip().partition(" ")
    if label.startswith("python-rootfs"):
        return image_id, label
    return image_id, None
