"""``ContainerExecutor``: runs each action's Python code in one long-lived sandboxed session."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import struct
import uuid
from collections.abc import Mapping
from importlib import resources
from types import TracebackType
from typing import Any

from polyloop.adapters._output import cap_output
from polyloop.adapters.container._backends import LaunchSpec, Limits, Sandbox, SandboxBackend
from polyloop.adapters.container._errors import (
    BackendUnavailableError,
    ContainerError,
    SessionDeadError,
)
from polyloop.errors import ConfigurationError
from polyloop.ports import Action
from polyloop.types import ActionOutcome, ActionStatus

__all__ = ["ContainerExecutor"]

_HEADER = struct.Struct(">I")
#: A frame larger than this from the sandbox is a protocol violation (the output is capped).
_MAX_FRAME = 64 * 1024 * 1024


def _driver_source() -> str:
    return (
        resources.files("polyloop.adapters.container")
        .joinpath("_driver.py")
        .read_text(encoding="utf-8")
    )


def _positive(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigurationError(
            f"ContainerExecutor({name}={value!r}): must be a positive finite number of seconds."
        )
    return float(value)


class _Session:
    """The host end of one sandboxed interpreter speaking the driver's frame protocol."""

    def __init__(self, sandbox: Sandbox, session_id: str) -> None:
        self.sandbox = sandbox
        self.session_id = session_id
        self.info: dict[str, Any] = {}
        self._reading: asyncio.Task[dict[str, Any]] | None = None
        self._stderr_task = asyncio.ensure_future(self._collect_stderr())
        self.stderr_tail = b""

    async def _collect_stderr(self) -> None:
        stream = self.sandbox.process.stderr
        if stream is None:
            return
        while chunk := await stream.read(65536):
            self.stderr_tail = (self.stderr_tail + chunk)[-4000:]

    async def settle(self, seconds: float = 2.0) -> None:
        """Give a sandbox that is exiting a moment to finish writing its error output."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._stderr_task), seconds)

    def diagnostics(self) -> str:
        code = self.sandbox.process.returncode
        text = self.stderr_tail.decode(errors="replace").strip()
        parts = []
        if code is not None:
            parts.append(f"exit code {code}")
        if text:
            parts.append(f"stderr: {text[-800:]}")
        return "; ".join(parts) or "no diagnostics"

    async def _read_frame(self) -> dict[str, Any]:
        stream = self.sandbox.process.stdout
        assert stream is not None
        head = await stream.readexactly(_HEADER.size)
        (size,) = _HEADER.unpack(head)
        if size > _MAX_FRAME:
            raise ContainerError(f"the sandbox sent a frame of {size} bytes (limit {_MAX_FRAME})")
        body = await stream.readexactly(size)
        message = json.loads(body.decode("utf-8"))
        if not isinstance(message, dict):
            raise ContainerError("the sandbox sent a frame that is not a JSON object")
        return message

    async def receive(self, wait_seconds: float | None) -> dict[str, Any] | None:
        """The next frame, or ``None`` if none arrived within ``wait_seconds`` (the read goes on)."""
        if self._reading is None:
            self._reading = asyncio.ensure_future(self._read_frame())
        done, _ = await asyncio.wait({self._reading}, timeout=wait_seconds)
        if not done:
            return None
        task, self._reading = self._reading, None
        return task.result()

    async def send(self, message: Mapping[str, object]) -> None:
        stream = self.sandbox.process.stdin
        assert stream is not None
        body = json.dumps(message).encode("utf-8")
        stream.write(_HEADER.pack(len(body)) + body)
        await stream.drain()

    async def kill(self) -> None:
        """Kill everything in the sandbox, and settle this end's tasks and pipes."""
        try:
            await self.sandbox.kill()
        finally:
            for task in (self._reading, self._stderr_task):
                if task is not None and not task.done():
                    task.cancel()
            for task in (self._reading, self._stderr_task):
                if task is not None:
                    with contextlib.suppress(BaseException):
                        await task
            self._reading = None


class ContainerExecutor:
    """An ``ActionExecutor`` that runs each action's Python code in one stateful session.

    The session is a long-lived Python interpreter inside a sandbox made by ``backend``
    (:class:`BubblewrapBackend` or :class:`DockerBackend`). Variables, imports and files in the
    scratch directory persist from one ``execute`` to the next; that is why ``parameters()``
    reports ``stateful=true`` and a ``session_id`` that changes whenever the session is
    replaced: ``resume`` then refuses to continue a run whose earlier steps ran elsewhere.

    Each action is a tool-less :class:`~polyloop.ports.Action` whose ``text`` is the code. It is
    run like a notebook cell: the value of a final expression is printed with ``repr``. Output
    (stdout and stderr, in the order written) is the observation; an exception is an observation
    too (its traceback, status ``EXECUTED``). Past ``time_limit_seconds`` the code gets a
    ``KeyboardInterrupt`` and the session survives; code still running ``interrupt_grace_seconds``
    later gets the whole sandbox killed: that action returns ``ENV_ERROR`` and every later
    ``execute`` raises :class:`SessionDeadError`. Observations are cut to ``max_output_chars``
    and ``observation_truncated_chars`` says how many characters of output were cut.

    Use it as an async context manager (or call ``start`` and ``close``); the sandbox is killed
    on exit, on cancellation of an action, and when this process dies.

    Its sessions are isolated and start empty, so it declares
    :class:`polyloop.ports.PrefixReplaying`: a fork given a fresh executor has the prefix's
    code executed again in it before the fork's own first step (design 0072).
    """

    def __init__(
        self,
        backend: SandboxBackend,
        *,
        limits: Limits | None = None,
        time_limit_seconds: float = 30.0,
        interrupt_grace_seconds: float = 2.0,
        start_timeout_seconds: float = 60.0,
        max_output_chars: int = 20_000,
    ) -> None:
        self.backend = backend
        self.limits = limits if limits is not None else Limits()
        if not isinstance(self.limits, Limits):
            raise ConfigurationError("ContainerExecutor(limits=...) must be a Limits.")
        self.time_limit_seconds = _positive("time_limit_seconds", time_limit_seconds)
        self.interrupt_grace_seconds = _positive("interrupt_grace_seconds", interrupt_grace_seconds)
        self.start_timeout_seconds = _positive("start_timeout_seconds", start_timeout_seconds)
        if (
            isinstance(max_output_chars, bool)
            or not isinstance(max_output_chars, int)
            or max_output_chars < 1
        ):
            raise ConfigurationError(
                f"ContainerExecutor(max_output_chars={max_output_chars!r}): must be an int >= 1."
            )
        self.max_output_chars = max_output_chars
        self._session_id = uuid.uuid4().hex
        self._session: _Session | None = None
        self._dead_reason: str | None = None
        self._actions = 0
        self._lock = asyncio.Lock()

    # -- identity ---------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """Identifies the session this executor runs actions in; new after ``restart``."""
        return self._session_id

    @property
    def sandbox_info(self) -> Mapping[str, object]:
        """What the driver reported at start (Python version, pid and uid inside)."""
        return dict(self._session.info) if self._session is not None else {}

    def parameters(self) -> Mapping[str, str]:
        """Backend, image, limits, time limit, output cap, statefulness and session identity.

        Synchronous, no I/O; the same values before and after ``start``.
        """
        params = {
            "backend": self.backend.name,
            "stateful": "true",
            "session_id": self._session_id,
            "network": "none",
            "time_limit_seconds": repr(self.time_limit_seconds),
            "interrupt_grace_seconds": repr(self.interrupt_grace_seconds),
            "max_output_chars": str(self.max_output_chars),
        }
        params.update(self.limits.parameters())
        for key, value in self.backend.parameters().items():
            if key in params:
                raise ConfigurationError(f"backend parameter {key!r} clashes with the executor's")
            params[key] = value
        return params

    # -- lifecycle --------------------------------------------------------------------------

    async def __aenter__(self) -> ContainerExecutor:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def alive(self) -> bool:
        """A session is started and has not died or been closed."""
        return self._session is not None and self._dead_reason is None

    async def start(self) -> None:
        """Start the session (``BackendUnavailableError`` says what is missing)."""
        async with self._lock:
            if self._session is not None:
                raise ContainerError(
                    "ContainerExecutor.start: a session is already running; call restart() to "
                    "replace it."
                )
            await self._start_locked()

    async def _start_locked(self) -> None:
        spec = LaunchSpec(
            session_id=self._session_id,
            python_args=(
                "-u",
                "-I",
                "-B",
                "-c",
                _driver_source(),
                str(self.max_output_chars),
                self._session_id,
                str(self.limits.memory_mb * 1024 * 1024),
            ),
            limits=self.limits,
        )
        sandbox = await self.backend.launch(spec)
        session = _Session(sandbox, self._session_id)
        try:
            ready = await session.receive(self.start_timeout_seconds)
            if ready is None or ready.get("op") != "ready":
                raise BackendUnavailableError(
                    f"The {self.backend.name} sandbox did not start its interpreter within "
                    f"{self.start_timeout_seconds:g} s ({session.diagnostics()})."
                )
        except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
            await session.settle()
            await session.kill()
            raise BackendUnavailableError(
                f"The {self.backend.name} sandbox exited before its interpreter was ready "
                f"({session.diagnostics()}). Check the image/python path and the limits."
            ) from exc
        except BaseException:
            await session.kill()
            raise
        session.info = {key: value for key, value in ready.items() if key != "op"}
        self._session = session
        self._dead_reason = None
        self._actions = 0

    async def close(self) -> None:
        """Kill the session's sandbox. Idempotent; the executor can be started again."""
        session, self._session = self._session, None
        if session is not None:
            await asyncio.shield(session.kill())

    async def restart(self) -> None:
        """Replace the session by a fresh one: all state is lost and ``session_id`` changes."""
        async with self._lock:
            session, self._session = self._session, None
            if session is not None:
                await session.kill()
            self._session_id = uuid.uuid4().hex
            await self._start_locked()

    # -- actions ----------------------------------------------------------------------------

    def can_replay_prefix(self) -> bool:
        """Whether a fork can bring this session to its fork step by executing the prefix's
        actions again (:class:`polyloop.ports.PrefixReplaying`): the session is started,
        alive and fresh (no action ran in it). A sandbox starts empty and has no network, so
        the actions repeat nothing outside it."""
        return self.alive and self._actions == 0

    async def replay_action(self, action: Action) -> ActionOutcome:
        """Execute one of a fork's prefix actions again in this session (``execute``)."""
        return await self.execute(action)

    async def execute(self, action: Action) -> ActionOutcome:
        if action.tool_call is not None:
            raise ContainerError(
                f"ContainerExecutor runs code, not tool calls (got tool {action.tool_call.name!r}); "
                "use a decision parser that yields tool-less actions with the code in Action.text."
            )
        async with self._lock:
            session = self._session
            if session is None:
                raise SessionDeadError(
                    "ContainerExecutor has no session: use `async with ContainerExecutor(...)` "
                    "or await start() before executing actions."
                )
            if self._dead_reason is not None:
                raise SessionDeadError(
                    f"The session {self._session_id} is dead ({self._dead_reason}); its state "
                    "is lost. Stop this run; restart() starts a new session for a new run."
                )
            self._actions += 1
            action_id = self._actions
            try:
                return await self._execute_locked(session, action_id, action.text)
            except asyncio.CancelledError:
                self._dead_reason = "an action was cancelled while it ran; the sandbox was killed"
                await asyncio.shield(self._kill(session))
                raise

    async def _kill(self, session: _Session) -> None:
        await session.kill()

    async def _execute_locked(self, session: _Session, action_id: int, code: str) -> ActionOutcome:
        try:
            await session.send({"op": "exec", "id": action_id, "code": code})
            reply = await session.receive(self.time_limit_seconds)
            interrupted_by_limit = False
            if reply is None:
                interrupted_by_limit = True
                await session.send({"op": "interrupt", "id": action_id})
                reply = await session.receive(self.interrupt_grace_seconds)
                if reply is None:
                    self._dead_reason = (
                        f"action {action_id} ignored the interrupt at its time limit "
                        f"({self.time_limit_seconds:g} s) for {self.interrupt_grace_seconds:g} s, "
                        "so the sandbox was killed"
                    )
                    await session.kill()
                    return ActionOutcome(
                        status=ActionStatus.ENV_ERROR,
                        observation=(
                            f"The code ran past its time limit of {self.time_limit_seconds:g} s "
                            "and did not stop when interrupted; the sandbox was killed and the "
                            "session's state is lost."
                        ),
                        observation_is_synthetic=True,
                        env_reported_completion=False,
                        observation_truncated_chars=0,
                    )
        except (asyncio.IncompleteReadError, ConnectionError, ValueError, ContainerError) as exc:
            await session.settle()
            diagnostics = session.diagnostics()
            self._dead_reason = f"the interpreter went away during action {action_id}"
            await session.kill()
            raise SessionDeadError(
                f"The session {self._session_id} died while running action {action_id} "
                f"({type(exc).__name__}: {exc}; {diagnostics}). Typical causes: the code "
                "exceeded the memory limit, called os._exit, or the sandbox was killed. The "
                "state is lost: stop this run."
            ) from exc
        if reply.get("op") != "result" or reply.get("id") != action_id:
            self._dead_reason = "the sandbox broke the protocol"
            await session.kill()
            raise SessionDeadError(
                f"The session {self._session_id} answered action {action_id} with "
                f"{str(reply)[:200]}; the sandbox was killed."
            )
        output = str(reply.get("output", ""))
        dropped = int(reply.get("dropped_chars", 0))
        note = ""
        if interrupted_by_limit and reply.get("interrupted"):
            note = (
                f"\n[The code ran past its time limit of {self.time_limit_seconds:g} s and was "
                "interrupted; the session and its variables are kept.]\n"
            )
        capped = cap_output(output, dropped, note, self.max_output_chars)
        return ActionOutcome(
            status=ActionStatus.EXECUTED,
            observation=capped.text,
            observation_is_synthetic=False,
            env_reported_completion=False,
            observation_truncated_chars=capped.cut_chars,
        )
