"""One driver per run, with real processes and tasks: races over a crashed run, and killed holders.

Every side effect of the ledger agent's ``pay`` tool (replay NEVER) is appended to an fsynced
ledger with who made it, so a second execution cannot hide.

Races: the test process crashes a run part-way (a store wrapper raises a ``BaseException``
after a seeded number of acknowledged writes: what a dying process leaves behind), then two
drivers — two processes, or two tasks on one store object — call ``resume`` (or ``run`` and
``resume``) on it at the same moment. After each race: no ``pay`` ran twice, at most one
invocation drove the run (for two resumes exactly one), the other was refused with
``RunLeaseHeldError`` or returned the recorded result (two resumes), or was refused with the
lease error or ``RunAlreadyStartedError`` (``run`` on a started run), and the log is valid.

Kills: a process holding the lease is SIGKILLed inside a NEVER and inside a SAFE action,
also after the action left a child process running (plain ``fork``, and ``subprocess``).
Another process resumes at once (no wait), by the recovery table, while that child still lives.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import random
import signal
import socket
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from polyloop.errors import RunAlreadyStartedError, RunLeaseHeldError
from polyloop.ports import RunLeasing, RunStore
from polyloop.recovery import ResumeMove, plan_resume, validate_log
from polyloop.session import resume, run
from polyloop.types import StopReason
from tests.loop_kit import Crash, CrashingStore
from tests.stores import _agent
from tests.stores._helpers import DURABLE_KINDS, FILE_KINDS, close_store, open_store
from tests.stores._postgres import wait_until_sessions_end
from tests.stores._procs import child

pytestmark = [pytest.mark.crash, pytest.mark.race]

RACES = int(os.environ.get("POLYLOOP_LEASE_RACES", "20"))
#: Writes of an uninterrupted race run: start, 3 pay steps of 4 writes, the final step's 3, end.
RACE_RUN_WRITES = 1 + 3 * 4 + 3 + 1
MODES = {"resume+resume": ("resume", "resume"), "run+resume": ("run", "resume")}


async def _crash_run(store: RunStore, ledger: str, run_id: str, crash_after: int) -> None:
    """Leave ``run_id`` as a process dying after ``crash_after`` acknowledged writes would."""
    definition = _agent.ledger_definition(
        CrashingStore(store, crash_after),
        _agent.RACE_SCRIPT,
    )
    tools = _agent.ledger_tools(ledger, run_id, "origin")
    with pytest.raises(Crash):
        await run(definition, _agent.ledger_request(run_id, tools))


async def _check_race(
    store: RunStore,
    ledger: str,
    run_id: str,
    modes: tuple[str, str],
    outcomes: list[dict[str, Any]],
    tally: Counter[str],
) -> None:
    """The rules every race must keep; ``tally`` counts how races went."""
    effects = Counter(e["n"] for e in _agent.ledger_effects(ledger) if e["run_id"] == run_id)
    assert {} == {n: count for n, count in effects.items() if count > 1}, (run_id, outcomes)
    drivers = [o for o in outcomes if o["outcome"] == "drove"]
    assert len(drivers) <= 1, (run_id, outcomes)
    for mode, outcome in zip(modes, outcomes, strict=True):
        if mode == "run":
            assert outcome["outcome"] in ("refused", "error"), (run_id, outcomes)
            assert outcome["error"] in ("RunLeaseHeldError", "RunAlreadyStartedError"), outcomes
        elif outcome is not (drivers[0] if drivers else None):
            assert outcome["outcome"] in ("refused", "recorded"), (run_id, outcomes)
        tally[f"{mode}:{outcome['outcome']}"] += 1
    log = await store.read_log(run_id)
    validate_log(log, run_id)
    if modes == ("resume", "resume"):
        assert 1 == len(drivers), (run_id, outcomes)
    if drivers:
        assert log.finished is not None, (run_id, outcomes)
        assert drivers[0]["stop"] == log.finished.result.stop_reason.value
        assert log.finished.result.stop_reason in (
            StopReason.AGENT_FINISHED,
            StopReason.RESUME_STATE_UNKNOWN,
        )


def _outcome_of(result: object, definition: Any) -> dict[str, Any]:
    if isinstance(result, RunLeaseHeldError):
        return {"outcome": "refused", "error": "RunLeaseHeldError", "stop": None}
    if isinstance(result, RunAlreadyStartedError):
        return {"outcome": "error", "error": "RunAlreadyStartedError", "stop": None}
    if isinstance(result, BaseException):
        raise result
    stop = result.stop_reason.value  # type: ignore[attr-defined]
    return {
        "outcome": "drove" if _agent.drove(definition) else "recorded",
        "error": None,
        "stop": stop,
    }


class _Racer:
    """A racer worker process (``tests.stores._child racer``)."""

    def __init__(self, kind: str, where: str, ledger: str, who: str) -> None:
        self.process = child("racer", kind, where, ledger, who, stdin=True)
        assert "ready" == self.line()

    def line(self) -> str:
        assert self.process.stdout is not None
        text = self.process.stdout.readline()
        if not text:
            assert self.process.stderr is not None
            raise AssertionError(f"racer died:\n{self.process.stderr.read()}")
        return text.strip()

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(text + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.stdin = None
        _out, err = self.process.communicate(timeout=60)
        assert 0 == self.process.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_two_processes_racing_over_a_crashed_run_never_repeat_a_side_effect(
    kind: str, mode: str, tmp_path: object
) -> None:
    """Two processes race ``mode`` over a crashed run, RACES times: one driver, no NEVER
    action twice, the loser refused by the lease (or shown the recorded result), a valid log."""
    where, ledger = str(tmp_path), os.path.join(str(tmp_path), "ledger.jsonl")
    rng = random.Random(f"lease-race-processes-{kind}-{mode}")
    modes = MODES[mode]
    store = open_store(kind, where)
    racers = [_Racer(kind, where, ledger, who) for who in ("A", "B")]
    tally: Counter[str] = Counter()
    try:
        for number in range(RACES):
            run_id = f"race-{number}"
            await _crash_run(store, ledger, run_id, rng.randint(1, RACE_RUN_WRITES - 4))
            order = rng.sample(range(2), 2)  # who is told first changes from race to race
            for racer, each in zip(racers, modes, strict=True):
                racer.send(f"{each} {run_id}")
            for racer in racers:
                assert "set" == racer.line()
            for index in order:
                racers[index].send("go")
            outcomes = [json.loads(racer.line()) for racer in racers]
            await _check_race(store, ledger, run_id, modes, outcomes, tally)
    finally:
        for racer in racers:
            racer.close()
        await close_store(store)
    # The races were real: the lease refused a driver that would otherwise have run.
    assert tally["resume:refused"] + tally["run:refused"] > 0, tally


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_two_tasks_racing_over_a_crashed_run_never_repeat_a_side_effect(
    kind: str, mode: str, tmp_path: object
) -> None:
    """Two tasks on one store object race ``mode`` over a crashed run, RACES times: the same
    rules as for two processes."""
    where, ledger = str(tmp_path), os.path.join(str(tmp_path), "ledger.jsonl")
    rng = random.Random(f"lease-race-tasks-{kind}-{mode}")
    modes = MODES[mode]
    store = open_store(kind, where)
    tally: Counter[str] = Counter()
    try:
        for number in range(RACES):
            run_id = f"race-{number}"
            await _crash_run(store, ledger, run_id, rng.randint(1, RACE_RUN_WRITES - 4))
            definitions = [_agent.ledger_definition(store, _agent.RACE_SCRIPT) for _ in modes]
            calls = [
                (run if each == "run" else resume)(
                    definition,
                    _agent.ledger_request(run_id, _agent.ledger_tools(ledger, run_id, who)),
                )
                for each, definition, who in zip(modes, definitions, "AB", strict=True)
            ]
            if rng.random() < 0.5:
                calls.reverse()
                definitions.reverse()
                modes_now = (modes[1], modes[0])
            else:
                modes_now = modes
            results = await asyncio.gather(*calls, return_exceptions=True)
            outcomes = [_outcome_of(r, d) for r, d in zip(results, definitions, strict=True)]
            await _check_race(store, ledger, run_id, modes_now, outcomes, tally)
    finally:
        await close_store(store)
    assert tally["resume:refused"] + tally["run:refused"] > 0, tally


# ---------------------------------------------------------------------------
# SIGKILL of the holder
# ---------------------------------------------------------------------------

_PR_SET_CHILD_SUBREAPER = 36


@pytest.fixture
def subreaper() -> Iterator[None]:
    """Orphans of the holder become this process's children while the test runs, so the
    process a tool left behind can be reaped (no zombie is left to init)."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert 0 == libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0), ctypes.get_errno()
    try:
        yield
    finally:
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return handle.read().split(")")[-1].split()[0] != "Z"


def _kill_and_reap(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)  # our child now: this process is its subreaper


def _has_lease_file_open(pid: int) -> bool:
    names = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            names.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return any(name.endswith(".lease") for name in names)


KILLS = [
    ("never", "none"),
    ("safe", "none"),
    ("never", "fork"),
    ("safe", "subprocess"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("policy", "leave"), KILLS, ids=[f"{p}-{c}" for p, c in KILLS])
@pytest.mark.parametrize("kind", DURABLE_KINDS)
async def test_a_killed_holder_frees_the_run_at_once_for_a_resume_in_another_process(
    kind: str, policy: str, leave: str, tmp_path: object, subreaper: None
) -> None:
    """SIGKILL of the driver inside a ``policy`` action (after it left a child process running,
    where ``leave`` says so): the lease is free at once and resume follows the recovery table."""
    where, ledger, run_id = str(tmp_path), os.path.join(str(tmp_path), "ledger.jsonl"), "held"
    holder = child("hold", kind, where, run_id, policy, ledger, leave)
    assert holder.stdout is not None
    lines = iter(holder.stdout.readline, "")
    holder_pid = int(next(lines).split()[1])
    left_behind = int(next(lines).split()[1]) if leave != "none" else None
    assert "in-action" == next(lines).strip()
    store = open_store(kind, where)
    definition = _agent.ledger_definition(store, _agent.hold_script(policy))
    request = _agent.ledger_request(run_id, _agent.ledger_tools(ledger, run_id, "resumer"))
    try:
        assert isinstance(store, RunLeasing)
        holder_seen = await store.run_lease_holder(run_id)
        assert holder_seen is not None
        assert (holder_pid, socket.gethostname()) == (holder_seen.process_id, holder_seen.host_name)
        with pytest.raises(RunLeaseHeldError, match=f"process {holder_pid}") as refused:
            await resume(definition, request)
        assert holder_seen == refused.value.holder

        os.kill(holder_pid, signal.SIGKILL)
        holder.wait(timeout=30)
        if kind == "postgres":
            # The server frees the lease when it ends the dead process's session, which it does
            # once it has read the closed socket: waited for, as a resumer's acquire does.
            wait_until_sessions_end(holder_pid)
        if left_behind is not None:
            assert _alive(left_behind), "the child the tool left behind should still run"
            # The trap was set: a plain fork inherits the lease file's descriptor (and would
            # inherit a flock with it); exec closes it (O_CLOEXEC). The postgres store keeps
            # its leases in a server session, not in files.
            inherits = leave == "fork" and kind in FILE_KINDS
            assert inherits == _has_lease_file_open(left_behind)
        assert await store.run_lease_holder(run_id) is None
        before = await store.read_log(run_id)
        plan = plan_resume(before, max_consecutive_parse_failures=3, completing_tools=())
        result = await resume(definition, request)  # lease_wait_seconds=0: no waiting
    finally:
        if left_behind is not None:
            _kill_and_reap(left_behind)
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        for stream in (holder.stdout, holder.stderr):
            if stream is not None:
                stream.close()
        await close_store(store)
    effects = Counter(e["n"] for e in _agent.ledger_effects(ledger))
    if policy == "never":
        assert ResumeMove.STOP_STATE_UNKNOWN == plan.move
        assert StopReason.RESUME_STATE_UNKNOWN == result.stop_reason
        assert {0: 1, 1: 1} == dict(effects)
    else:
        assert ResumeMove.EXECUTE_ACTION_AGAIN == plan.move
        assert StopReason.AGENT_FINISHED == result.stop_reason
        assert {0: 1, 1: 2} == dict(effects)  # SAFE: done again, as the table says
    validate_log(await _read_again(kind, where, run_id), run_id)


async def _read_again(kind: str, where: str, run_id: str) -> Any:
    store = open_store(kind, where)
    try:
        return await store.read_log(run_id)
    finally:
        await close_store(store)
