"""Helpers of the CLI tests: run the real ``polyloop`` command, and write logs by hand."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyloop import testing
from polyloop.serialization import LogRecord
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import StepWrites
from polyloop.types import (
    ActionOutcome,
    Intent,
    ModelCallResult,
    ReplayPolicy,
    RunFinished,
    RunStarted,
    StepRecord,
    StopReason,
)

ANSI_ESCAPE = "\x1b["

#: The console script installed next to this interpreter.
POLYLOOP = str(Path(sys.executable).with_name("polyloop"))


@dataclass(frozen=True)
class Completed:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a user with no model configured and POLYLOOP_HOME at ``home``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI_", "POLYLOOP_"))
        and key not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")
    }
    env["POLYLOOP_HOME"] = str(home)
    env.update(extra)
    return env


def users_shell(home: Path) -> dict[str, str]:
    """``clean_env`` as the user's own shell has it after the set-up: the virtual environment
    neither activated nor on PATH (``uv run`` adds it for its child only)."""
    env = clean_env(home)
    venv_bin = str(Path(sys.executable).parent)
    env.pop("VIRTUAL_ENV", None)
    env["PATH"] = os.pathsep.join(
        part for part in env.get("PATH", "").split(os.pathsep) if part and part != venv_bin
    )
    return env


def pasted(line: str, *, env: Mapping[str, str], cwd: Path) -> Completed:
    """``line`` run by bash exactly as pasted into a shell in ``cwd``."""
    process = subprocess.run(
        ["bash", "-c", line],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=cwd,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return Completed(process.returncode, process.stdout, process.stderr)


def printed_commands(lines: Iterable[str]) -> list[str]:
    """The commands in ``lines``, each with its `` \\`` continuation lines (as pasted)."""
    commands: list[str] = []
    continued = False
    for line in lines:
        if continued:
            commands[-1] += "\n" + line
        else:
            commands.append(line.strip())
        continued = line.endswith("\\")
    return commands


def one_line(command: str) -> str:
    """A printed command with its line continuations removed, as the shell reads it."""
    return command.replace("\\\n", "")


def inspect_commands(demo_output: str) -> list[str]:
    """The commands the demo prints at its end, under "Inspect"."""
    lines = demo_output.splitlines()
    start = next(index for index, line in enumerate(lines) if line.startswith("Inspect"))
    return printed_commands(line for line in lines[start + 1 :] if line.strip())


def polyloop(
    *args: str, env: Mapping[str, str], cwd: Path | None = None, timeout: float = 60
) -> Completed:
    """Run the installed ``polyloop`` command with stdout and stderr piped (not a TTY)."""
    process = subprocess.run(
        [POLYLOOP, *args],
        capture_output=True,
        text=True,
        env=dict(env),
        cwd=cwd,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return Completed(process.returncode, process.stdout, process.stderr)


#: Escape sequences a terminal interprets (colour, cursor), removed before reading the screen.
_TERMINAL_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


def polyloop_on_terminal(
    *args: str, env: Mapping[str, str], columns: int = 80, cwd: Path | None = None
) -> Completed:
    """Run ``polyloop`` with stdout and stderr on a real pseudo-terminal ``columns`` wide
    (``COLUMNS`` set too, as a shell does); returns the screen text without escape codes."""
    import fcntl
    import pty
    import struct
    import termios

    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    process = subprocess.Popen(
        [POLYLOOP, *args],
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
        env={**env, "COLUMNS": str(columns)},
        cwd=cwd,
    )
    os.close(secondary)
    chunks = []
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the last writer closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    code = process.wait(timeout=60)
    screen = _TERMINAL_CONTROL.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")
    return Completed(code, screen, "")


def headline(result: Completed) -> str:
    """The part of a one-line error before any ``Detail:``, without the ``polyloop: error:``."""
    line = result.stderr.strip().removeprefix("polyloop: error: ")
    return line.split(" Detail: ")[0]


def assert_one_line_error(result: Completed, code: int) -> None:
    """A user-caused error: the expected exit code, one line on stderr, no traceback."""
    assert result.code == code, (result.code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("polyloop: error: ")


# ---------------------------------------------------------------------------
# Hand-built logs
# ---------------------------------------------------------------------------

#: A snapshot holding what `polyloop plan` reads: the parse-failure limit and the tools.
SNAPSHOT = {
    "model_client.kind": "scripted",
    "model_client.name": "hand-built",
    "request.budget.max_consecutive_parse_failures": "2",
    "request.tools.lookup.replay_policy": "safe",
    "request.tools.lookup.completes_run": "false",
    "request.tools.close.replay_policy": "never",
    "request.tools.close.completes_run": "true",
}


def started(run_id: str, snapshot: Mapping[str, str] = SNAPSHOT) -> RunStarted:
    return testing.run_started(run_id, snapshot)


def _tool(
    run_id: str,
    k: int,
    tool: str,
    policy: ReplayPolicy = ReplayPolicy.SAFE,
    observation: str = "ok",
) -> StepWrites:
    return testing.tool_step(
        run_id,
        k,
        tool_name=tool,
        observation=observation,
        replay_policy=policy,
        prompt_chars=100 + k,
        step_wall_ms=3,
    )


def _final(run_id: str, k: int, answer: str = "done") -> StepWrites:
    return testing.final_step(run_id, k, answer, prompt_chars=200)


def _parse_failure(run_id: str, k: int) -> StepWrites:
    return testing.parse_failure_step(
        run_id, k, explanation="Reply with one of: ...", prompt_chars=50
    )


def model_intent(run_id: str, k: int, policy: ReplayPolicy = ReplayPolicy.SAFE) -> Intent:
    return testing.final_step(run_id, k, model_replay_policy=policy).model_intent


def action_intent(run_id: str, k: int, policy: ReplayPolicy) -> Intent:
    intent = _tool(run_id, k, "any", policy).action_intent
    assert intent is not None
    return intent


def model_result(run_id: str, k: int, content: str) -> ModelCallResult:
    """The result of step ``k``'s model call, replying ``content`` (whatever it parses into)."""
    return testing.final_step(run_id, k, content=content).model_result


def tool_step(k: int, tool: str, observation: str = "ok") -> StepRecord:
    return _tool("", k, tool, observation=observation).step


def final_step(k: int, answer: str) -> StepRecord:
    return _final("", k, answer).step


def parse_failure_step(k: int) -> StepRecord:
    """The step of a reply that did not parse: no action, a synthetic observation."""
    return _parse_failure("", k).step


def parse_failure_records(run_id: str, k: int) -> list[LogRecord]:
    """The three records of one step whose reply did not parse."""
    return list(_parse_failure(run_id, k).records)


def outcome(observation: str = "ok") -> ActionOutcome:
    completed = _tool("", 0, "any", observation=observation).step_completed
    assert completed.action_outcome is not None
    return completed.action_outcome


def tool_step_records(run_id: str, k: int, tool: str, policy: ReplayPolicy) -> list[LogRecord]:
    """The four records of one completed tool step."""
    return list(_tool(run_id, k, tool, policy).records)


def finished(run_id: str, reason: StopReason, steps: Iterable[StepRecord]) -> RunFinished:
    return testing.run_finished(run_id, steps, reason)


async def write(store: SqliteRunStore | JsonlRunStore, records: Iterable[LogRecord]) -> None:
    """Write records through the store's public API, in order."""
    await testing.write_records(store, records)
