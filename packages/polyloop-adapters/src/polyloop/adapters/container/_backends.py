"""The internal seam between the executor and a sandbox technology, and its two backends.

A backend knows how to start one sandboxed interpreter (``launch``) and how to kill everything
in it (``Sandbox.kill``). Everything else (the protocol, time limits, output cap, session
identity) lives in the executor and is the same for every backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from polyloop.adapters.container._errors import BackendUnavailableError
from polyloop.errors import ConfigurationError

__all__ = [
    "DEFAULT_DOCKER_IMAGE",
    "BubblewrapBackend",
    "DockerBackend",
    "LaunchSpec",
    "Limits",
    "Sandbox",
    "SandboxBackend",
]

#: The tag :func:`polyloop.adapters.container.ensure_docker_image` builds and the docker
#: backend uses by default.
DEFAULT_DOCKER_IMAGE = "polyloop-python:local"

#: The label every container of this library carries, with the session id as its value.
SESSION_LABEL = "io.polyloop.session"
#: The label naming the process that owns the container (``hostname:pid``).
OWNER_LABEL = "io.polyloop.owner"


#: Backend configurations that passed ``check`` in this process (a failed launch after that still
#: reports its own diagnostics).
_CHECKED: set[tuple[object, ...]] = set()
#: Per bwrap binary: does it support ``--disable-userns``?
_BWRAP_FEATURES: dict[str, bool] = {}


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits of one sandbox.

    ``memory_mb`` bounds the memory of everything inside (the scratch tmpfs included where the
    backend charges it to the sandbox); ``max_processes`` bounds processes and threads inside;
    ``scratch_mb`` is the size of the private writable scratch directory.
    """

    memory_mb: int = 512
    max_processes: int = 64
    scratch_mb: int = 64
    #: The unprivileged user (and group) id the code runs as.
    uid: int = 65534

    def __post_init__(self) -> None:
        for name in ("memory_mb", "max_processes", "scratch_mb", "uid"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigurationError(
                    f"Limits.{name} must be a positive int, got {value!r}; "
                    "use a whole number (uid 0 would run the code as root)."
                )

    def parameters(self) -> dict[str, str]:
        return {
            "memory_mb": str(self.memory_mb),
            "max_processes": str(self.max_processes),
            "scratch_mb": str(self.scratch_mb),
            "uid": str(self.uid),
        }


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """What the executor asks a backend to start."""

    session_id: str
    #: The interpreter's arguments after the interpreter itself (``-u -I -c DRIVER ...``).
    python_args: tuple[str, ...]
    limits: Limits
    #: The scratch directory inside the sandbox; also the working directory.
    workdir: str = "/scratch"


class Sandbox(Protocol):
    """One started sandbox: the interpreter's pipes and a way to stop everything inside."""

    @property
    def process(self) -> asyncio.subprocess.Process: ...

    async def kill(self) -> None:
        """Kill every process in the sandbox and wait until they are gone. Idempotent."""
        ...


class SandboxBackend(Protocol):
    """Starts sandboxes of one technology. ``parameters`` is synchronous and does no I/O."""

    name: str

    def parameters(self) -> Mapping[str, str]: ...

    async def check(self) -> None:
        """Raise :class:`BackendUnavailableError` saying what is missing, or return."""
        ...

    async def launch(self, spec: LaunchSpec) -> Sandbox: ...


async def _run(argv: Sequence[str], limit_seconds: float = 30.0) -> tuple[int, str, str]:
    """Run a short helper command; return (exit code, stdout, stderr)."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), limit_seconds)
    except BaseException:
        await _close_process(proc)
        raise
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


async def _close_process(proc: asyncio.subprocess.Process) -> None:
    """Kill a helper or client process, wait for it, and close its pipes."""
    if proc.returncode is None:
        # os.kill, not proc.kill(): Popen.send_signal polls first, and a poll that reaps the
        # process behind asyncio's child watcher's back loses its exit status.
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
    await proc.wait()
    if proc.stdin is not None:
        proc.stdin.close()
        with contextlib.suppress(Exception):
            await proc.stdin.wait_closed()


# ---------------------------------------------------------------------------
# bubblewrap
# ---------------------------------------------------------------------------


class _Cgroup:
    """A per-sandbox cgroup (v1: memory + pids controllers; v2: one directory)."""

    def __init__(self, directories: list[Path], version: int) -> None:
        self.directories = directories
        self.version = version

    @staticmethod
    def create(name: str, limits: Limits) -> _Cgroup:
        """Create and configure the cgroup; raise OSError when this machine does not allow it."""
        root = Path("/sys/fs/cgroup")
        memory_bytes = limits.memory_mb * 1024 * 1024
        if (root / "cgroup.controllers").exists():
            own = _own_cgroup_path("")
            base = root / own.lstrip("/")
            directory = base / name
            directory.mkdir()
            try:
                (directory / "memory.max").write_text(str(memory_bytes))
                with contextlib.suppress(OSError):
                    (directory / "memory.swap.max").write_text("0")
                (directory / "pids.max").write_text(str(limits.max_processes))
            except OSError:
                directory.rmdir()
                raise
            return _Cgroup([directory], 2)
        made: list[Path] = []
        try:
            memory = root / "memory" / _own_cgroup_path("memory").lstrip("/") / name
            memory.mkdir()
            made.append(memory)
            (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
            swap = memory / "memory.memsw.limit_in_bytes"
            if swap.exists():
                swap.write_text(str(memory_bytes))
            pids = root / "pids" / _own_cgroup_path("pids").lstrip("/") / name
            pids.mkdir()
            made.append(pids)
            (pids / "pids.max").write_text(str(limits.max_processes))
        except OSError:
            for directory in reversed(made):
                with contextlib.suppress(OSError):
                    directory.rmdir()
            raise
        return _Cgroup(made, 1)

    @property
    def procs_files(self) -> list[str]:
        return [str(directory / "cgroup.procs") for directory in self.directories]

    def pids(self) -> set[int]:
        found: set[int] = set()
        for directory in self.directories:
            with contextlib.suppress(OSError):
                for line in (directory / "cgroup.procs").read_text().split():
                    found.add(int(line))
        return found

    async def kill_all(self) -> None:
        """SIGKILL every process in the cgroup until it is empty, then remove it."""
        for _ in range(200):
            if self.version == 2:
                with contextlib.suppress(OSError):
                    (self.directories[0] / "cgroup.kill").write_text("1")
            pids = self.pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            removed = True
            for directory in self.directories:
                try:
                    if directory.exists():
                        directory.rmdir()
                except OSError:
                    removed = False
            if removed:
                return
            await asyncio.sleep(0.01)


def _own_cgroup_path(controller: str) -> str:
    """This process's cgroup path for a v1 controller, or the v2 path for ``""``."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller == "" and controllers == "":
            return path
        if controller and controller in controllers.split(","):
            return path
    raise OSError(f"this process is in no {controller or 'v2'} cgroup")


class _BubblewrapSandbox:
    def __init__(self, proc: asyncio.subprocess.Process, cgroup: _Cgroup | None) -> None:
        self._proc = proc
        self._cgroup = cgroup
        self._killed = False

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._proc

    async def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        # bwrap runs the code in its own PID namespace whose init dies with bwrap
        # (--die-with-parent sets the parent-death signal): killing bwrap kills everything
        # inside. The cgroup sweep makes that certain even for a process stuck in the kernel.
        await _close_process(self._proc)
        if self._cgroup is not None:
            await self._cgroup.kill_all()


class BubblewrapBackend:
    """Sandboxes made with bubblewrap (``bwrap``): namespaces without a daemon.

    The code runs in fresh user, PID, network, IPC, UTS and mount namespaces, as ``limits.uid``
    (bwrap itself is started as that user when the host process is root), with every capability
    dropped, ``--die-with-parent``, a read-only root made only of ``rootfs`` (default: the host's
    ``/usr``, so ``/root``, ``/home``, ``/etc`` and the work tree are absent), a size-limited
    tmpfs scratch directory, and no environment variables but ``PATH``, ``HOME`` and ``TMPDIR``.
    Memory and process limits use a per-sandbox cgroup when this process may create one
    (``limits_via="cgroup"``), else ``setrlimit`` (``"rlimit"``: address space and process
    count of the unprivileged user); ``"auto"`` tries the cgroup first.
    """

    name = "bubblewrap"

    def __init__(
        self,
        *,
        rootfs: str | None = None,
        python: str = "/usr/bin/python3",
        bwrap: str = "bwrap",
        limits_via: str = "auto",
    ) -> None:
        if limits_via not in ("auto", "cgroup", "rlimit"):
            raise ConfigurationError(
                f"BubblewrapBackend(limits_via={limits_via!r}): use 'auto', 'cgroup' or 'rlimit'."
            )
        self.rootfs = rootfs
        self.python = python
        self.bwrap = bwrap
        self.limits_via = limits_via
        #: The mechanism the last launched sandbox used for its limits ("cgroup-v1",
        #: "cgroup-v2" or "rlimit"); empty before the first launch.
        self.limits_mechanism = ""

    def parameters(self) -> Mapping[str, str]:
        return {
            "image": f"rootfs:{self.rootfs}" if self.rootfs else "host:/usr",
            "python": self.python,
            "limits_via": self.limits_via,
        }

    async def check(self) -> None:
        key = ("bubblewrap", shutil.which(self.bwrap), self.rootfs, self.python, os.geteuid())
        if key in _CHECKED:
            return
        path = shutil.which(self.bwrap)
        if path is not None and path not in _BWRAP_FEATURES:
            _, out, err = await _run([path, "--help"], limit_seconds=20.0)
            _BWRAP_FEATURES[path] = "--disable-userns" in out + err
        if path is None:
            raise BackendUnavailableError(
                f"bubblewrap is not installed: no {self.bwrap!r} on PATH. Install it "
                "(Debian/Ubuntu: `apt-get install bubblewrap`) or use DockerBackend."
            )
        root = self.rootfs or "/"
        python = Path(root) / self.python.lstrip("/")
        if not python.exists():
            raise BackendUnavailableError(
                f"The sandbox interpreter {self.python} does not exist in "
                f"{'the rootfs ' + root if self.rootfs else 'the host /usr'}. Install Python "
                "there (Debian: `apt-get install python3-minimal`) or pass python=..."
            )
        code, _, err = await _run(
            [
                *self._prefix(Limits().uid),
                path,
                *self._bwrap_args(Limits(), "/scratch"),
                "--",
                self.python,
                "-c",
                "",
            ],
            limit_seconds=20.0,
        )
        if code != 0 and "Can't find source path" in err:
            raise BackendUnavailableError(
                f"bubblewrap cannot read the sandbox's root ({err.strip()[:300]}): every "
                f"directory down to {root} must be readable and searchable by the sandbox user "
                f"(uid {Limits().uid}); a directory under a private (0700) one is not."
            )
        if code != 0:
            raise BackendUnavailableError(
                f"bubblewrap cannot create a sandbox here (exit {code}): {err.strip()[:500]}. "
                "It needs unprivileged user namespaces (sysctl user.max_user_namespaces > 0, "
                "and kernel.unprivileged_userns_clone=1 or an AppArmor profile allowing bwrap "
                "where those exist); inside a container it needs one started with enough "
                "privileges. Otherwise use DockerBackend."
            )
        _CHECKED.add(key)

    def _prefix(self, uid: int) -> list[str]:
        """Drop from root to the sandbox user before bwrap runs (it then maps that uid)."""
        if os.geteuid() != 0:
            return []
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise BackendUnavailableError(
                "setpriv (util-linux) is missing; it is needed to start bubblewrap as an "
                "unprivileged user when this process is root. Install util-linux."
            )
        return [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]

    def _bwrap_args(self, limits: Limits, workdir: str) -> list[str]:
        args = ["--unshare-all"]
        if _BWRAP_FEATURES.get(shutil.which(self.bwrap) or "", False):
            # No nested user namespaces: the code cannot get a fresh set of capabilities
            # inside a namespace of its own (bwrap >= 0.8).
            args += ["--unshare-user", "--disable-userns"]
        if os.geteuid() != 0:
            # Not root: bwrap runs as this user; inside, the code is limits.uid all the same.
            if "--unshare-user" not in args:
                args.append("--unshare-user")
            args += ["--uid", str(limits.uid), "--gid", str(limits.uid)]
        args += [
            "--die-with-parent",
            "--new-session",
            "--hostname",
            "sandbox",
        ]
        # The sandbox's root is a fresh tmpfs (made read-only below); the top-level entries of
        # the root file system are bound into it, so the image needs no mount points of its own.
        if self.rootfs:
            base = Path(self.rootfs)
            names = sorted(p.name for p in base.iterdir()) if base.is_dir() else []
        else:
            base = Path("/")
            names = ["usr", "bin", "lib", "lib32", "lib64", "libx32", "sbin"]
        for name in names:
            source = base / name
            if name in ("proc", "dev", "sys", workdir.strip("/")):
                continue
            if source.is_symlink():
                args += ["--symlink", os.readlink(source), f"/{name}"]
            elif source.exists():
                args += ["--ro-bind", str(source), f"/{name}"]
        args += [
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--size",
            str(limits.scratch_mb * 1024 * 1024),
            "--tmpfs",
            workdir,
            "--remount-ro",
            "/",
            "--chdir",
            workdir,
            "--clearenv",
            "--setenv",
            "PATH",
            "/usr/local/bin:/usr/bin:/bin",
            "--setenv",
            "HOME",
            workdir,
            "--setenv",
            "TMPDIR",
            workdir,
            "--cap-drop",
            "ALL",
        ]
        return args

    async def launch(self, spec: LaunchSpec) -> Sandbox:
        await self.check()
        bwrap = shutil.which(self.bwrap)
        assert bwrap is not None
        limits = spec.limits
        prefix = self._prefix(limits.uid)
        cgroup: _Cgroup | None = None
        if self.limits_via in ("auto", "cgroup"):
            try:
                cgroup = _Cgroup.create(f"polyloop-{spec.session_id}", limits)
            except OSError as exc:
                if self.limits_via == "cgroup":
                    raise BackendUnavailableError(
                        f"Cannot create a cgroup for the sandbox's limits ({exc}); run as root "
                        "with a writable cgroup file system, or pass limits_via='rlimit'."
                    ) from exc
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        if cgroup is not None:
            self.limits_mechanism = f"cgroup-v{cgroup.version}"
            # Join the cgroup before anything of the sandbox exists, then become bwrap.
            wrapper = [
                "/bin/sh",
                "-c",
                'for f in $POLYLOOP_CGROUP_PROCS; do echo $$ > "$f" || '
                '{ echo "polyloop: cannot join cgroup $f" >&2; exit 97; }; done; exec "$@"',
                "sh",
            ]
            env["POLYLOOP_CGROUP_PROCS"] = " ".join(cgroup.procs_files)
        else:
            self.limits_mechanism = "rlimit"
            prlimit = shutil.which("prlimit")
            if prlimit is None:
                raise BackendUnavailableError(
                    "prlimit (util-linux) is missing; it is needed to set the sandbox's "
                    "rlimits. Install util-linux, or allow a cgroup (run as root)."
                )
            wrapper = [
                prlimit,
                f"--as={limits.memory_mb * 1024 * 1024}",
                f"--nproc={limits.max_processes}",
                "--",
            ]
        argv = [
            *wrapper,
            *prefix,
            bwrap,
            *self._bwrap_args(limits, spec.workdir),
            "--",
            self.python,
            *spec.python_args,
        ]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                start_new_session=True,
            )
        except BaseException:
            if cgroup is not None:
                await cgroup.kill_all()
            raise
        return _BubblewrapSandbox(proc, cgroup)


# ---------------------------------------------------------------------------
# docker
# ---------------------------------------------------------------------------


class _DockerSandbox:
    def __init__(self, proc: asyncio.subprocess.Process, docker: str, name: str) -> None:
        self._proc = proc
        self._docker = docker
        self._name = name
        self._killed = False

    @property
    def process(self) -> asyncio.subprocess.Process:
        return self._proc

    async def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        # Killing the client alone would leave the container running: remove it by name.
        try:
            await _run([self._docker, "rm", "--force", self._name], limit_seconds=30.0)
        finally:
            await _close_process(self._proc)


class DockerBackend:
    """Sandboxes that are Docker containers (a running Docker Engine is required).

    Each session is ``docker run --rm -i --init`` of ``image`` with ``--network none``,
    ``--read-only``, ``--cap-drop ALL``, ``no-new-privileges``, ``--user limits.uid``,
    ``--memory`` (swap included), ``--pids-limit``, a tmpfs scratch directory, no logging of the
    protocol (``--log-driver none``), and the labels ``io.polyloop.session`` and
    ``io.polyloop.owner``. The image must contain ``python`` (3.8+); build the default one from
    this machine's Python with :func:`ensure_docker_image`.
    """

    name = "docker"

    def __init__(
        self,
        *,
        image: str = DEFAULT_DOCKER_IMAGE,
        python: str = "/usr/bin/python3",
        docker: str = "docker",
    ) -> None:
        self.image = image
        self.python = python
        self.docker = docker

    def parameters(self) -> Mapping[str, str]:
        return {"image": self.image, "python": self.python}

    def _docker_path(self) -> str:
        path = shutil.which(self.docker)
        if path is None:
            raise BackendUnavailableError(
                f"The Docker client {self.docker!r} is not on PATH. Install Docker "
                "(Debian: `apt-get install docker.io`) or use BubblewrapBackend."
            )
        return path

    async def check(self) -> None:
        docker = self._docker_path()
        key = ("docker", docker, os.environ.get("DOCKER_HOST"), self.image)
        if key in _CHECKED:
            return
        code, out, err = await _run(
            [docker, "version", "--format", "{{.Server.Version}}"], limit_seconds=20.0
        )
        if code != 0 or not out.strip():
            raise BackendUnavailableError(
                "No Docker Engine answers (`docker version`: "
                f"{(err or out).strip()[:300]}). Start the daemon (e.g. `dockerd "
                "--iptables=false --bridge=none &`, as .ci/install-system does) or use "
                "BubblewrapBackend."
            )
        code, _, err = await _run([docker, "image", "inspect", self.image], limit_seconds=20.0)
        if code != 0:
            raise BackendUnavailableError(
                f"The Docker image {self.image!r} is not present ({err.strip()[:200]}). Build "
                "the default one from this machine's Python with "
                "`python -m polyloop.adapters.container build-image`, or pass an image that "
                "contains Python 3.8+ at the configured python path."
            )
        # Containers left by processes of this host that died without cleaning up.
        await remove_orphan_containers(docker)
        _CHECKED.add(key)

    async def launch(self, spec: LaunchSpec) -> Sandbox:
        await self.check()
        docker = self._docker_path()
        limits = spec.limits
        name = f"polyloop-{spec.session_id}"
        argv = [
            docker,
            "run",
            "--rm",
            "-i",
            "--init",
            "--name",
            name,
            "--label",
            f"{SESSION_LABEL}={spec.session_id}",
            "--label",
            f"{OWNER_LABEL}={socket.gethostname()}:{os.getpid()}",
            "--network",
            "none",
            "--read-only",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "--user",
            f"{limits.uid}:{limits.uid}",
            "--memory",
            f"{limits.memory_mb}m",
            "--memory-swap",
            f"{limits.memory_mb}m",
            "--pids-limit",
            str(limits.max_processes),
            "--tmpfs",
            f"{spec.workdir}:rw,size={limits.scratch_mb}m,uid={limits.uid},gid={limits.uid},mode=0700",
            "--workdir",
            spec.workdir,
            "--env",
            f"HOME={spec.workdir}",
            "--env",
            f"TMPDIR={spec.workdir}",
            "--log-driver",
            "none",
            "--hostname",
            "sandbox",
            self.image,
            self.python,
            *spec.python_args,
        ]
        env = {
            key: value
            for key, value in os.environ.items()
            if key in ("PATH", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CONTEXT", "HOME")
        }
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        return _DockerSandbox(proc, docker, name)


async def remove_orphan_containers(docker: str = "docker") -> list[str]:
    """Remove this library's containers whose owning process (on this host) is gone.

    Returns the names removed. A process killed with SIGKILL cannot remove its own container;
    the container usually stops by itself (its input closes), and this sweeps the rest.
    """
    path = shutil.which(docker)
    if path is None:
        return []
    code, out, _ = await _run(
        [
            path,
            "ps",
            "--all",
            "--filter",
            f"label={OWNER_LABEL}",
            "--format",
            f'{{{{.Names}}}} {{{{.Label "{OWNER_LABEL}"}}}}',
        ]
    )
    if code != 0:
        return []
    host = socket.gethostname()
    removed: list[str] = []
    for line in out.splitlines():
        name, _, owner = line.partition(" ")
        owner_host, _, pid = owner.rpartition(":")
        if owner_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        code, _, _ = await _run([path, "rm", "--force", name])
        if code == 0:
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
