"""Child processes for the multi-process and crash tests: ``python -m tests.stores._child``.

Commands (arguments are positional):

- ``drive KIND WHERE PREFIX RUNS STEPS``: run RUNS agent runs concurrently through
  ``polyloop.session.run``, printing one JSON line per acknowledged store write.
- ``race KIND WHERE RUN_ID LABEL``: print ``ready``, wait for a line on stdin, call ``run``
  once; print ``won <stop reason>`` or ``lost <error type>``.
- ``write KIND WHERE PREFIX RUNS STEPS``: write RUNS whole logs at the store level.
- ``zygote-batching KIND WHERE``: the same as ``zygote``, the store passing batches through
  (design 0055), so the loop writes a step in two durable writes.
- ``zygote KIND WHERE``: import and warm up everything once, then for every line
  ``PREFIX RUNS STEPS`` on stdin fork a process that does ``drive`` (its lines go to this
  stdout), print ``pid <pid>`` first and, once it is gone, ``\\nreaped <pid>``. Crash tests kill
  the forked process, so each kill costs a run, not an interpreter start.
- ``disk-full KIND WHERE``: cap the file size (RLIMIT_FSIZE), write until the disk refuses,
  then check the error, read back, lift the cap and write again. Prints a JSON report.
- ``racer KIND WHERE LEDGER WHO``: a lease-race worker. For every line ``MODE RUN_ID`` on stdin
  (MODE ``run`` or ``resume``) it builds the ledger agent, prints ``set``, waits for a line,
  calls MODE once and prints one JSON line: ``{"outcome": "drove"|"recorded"|"refused"|
  "error", "error": <type or null>, "stop": <stop reason or null>}``.
- ``hold KIND WHERE RUN_ID POLICY LEDGER LEAVE``: ``run`` the ledger agent's kill script; its
  step-1 tool (replay POLICY) prints ``in-action`` and hangs, after leaving a child process
  running when LEAVE is ``fork`` or ``subprocess`` (``child <pid>`` comes first).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import signal
import sys
from collections.abc import Sequence

from polyloop.errors import PolyLoopError, RunLeaseHeldError
from polyloop.ports import LeaseHolder, RecordBatching, RunLease, RunLeasing, RunLog, RunStore
from polyloop.serialization import LogRecord, dumps_log_record
from polyloop.session import resume, run
from polyloop.types import IntentKind
from tests.stores import _agent
from tests.stores._helpers import close_store, intent, open_store, started, write_run


def _say(line: str) -> None:
    """One line, one ``write`` system call: lines of processes sharing stdout never mix
    (pipe writes up to PIPE_BUF bytes are atomic; these lines are shorter)."""
    os.write(sys.stdout.fileno(), (line + "\n").encode())


class PrintingStore:
    """Passes writes (and the run leases) through and prints each write once acknowledged."""

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner

    async def _write(self, method: str, record: LogRecord) -> None:
        await getattr(self.inner, method)(record)
        _say(json.dumps({"w": method, "rec": dumps_log_record(record)}))

    async def write_run_started(self, record: LogRecord) -> None:
        await self._write("write_run_started", record)

    async def write_intent(self, record: LogRecord) -> None:
        await self._write("write_intent", record)

    async def write_model_call_result(self, record: LogRecord) -> None:
        await self._write("write_model_call_result", record)

    async def write_step_completed(self, record: LogRecord) -> None:
        await self._write("write_step_completed", record)

    async def write_run_finished(self, record: LogRecord) -> None:
        await self._write("write_run_finished", record)

    async def read_log(self, run_id: str) -> RunLog:
        return await self.inner.read_log(run_id)

    async def acquire_run_lease(self, run_id: str) -> RunLease:
        assert isinstance(self.inner, RunLeasing)
        return await self.inner.acquire_run_lease(run_id)

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        assert isinstance(self.inner, RunLeasing)
        return await self.inner.run_lease_holder(run_id)

    def parameters(self) -> dict[str, str]:
        return dict(self.inner.parameters())


class BatchingPrintingStore(PrintingStore):
    """A :class:`PrintingStore` that also passes batches through
    (:class:`polyloop.ports.RecordBatching`), printing each record once the batch is durable."""

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        assert isinstance(self.inner, RecordBatching)
        await self.inner.write_records(records)
        for record in records:
            _say(json.dumps({"w": "write_records", "rec": dumps_log_record(record)}))


async def drive(
    kind: str, where: str, prefix: str, runs: int, steps: int, *, batching: bool = False
) -> None:
    store = open_store(kind, where)
    printing = (BatchingPrintingStore if batching else PrintingStore)(store)
    definition = _agent.definition(printing, steps)
    _say("ready")
    await asyncio.gather(
        *(run(definition, _agent.request(f"{prefix}-{i}", i, steps)) for i in range(runs))
    )
    await close_store(store)
    _say("done")


def _warm_up() -> None:
    """Run one throwaway run in memory so the forked drivers start hot (schemas compiled)."""
    from polyloop.stores.memory import MemoryRunStore

    store = MemoryRunStore()
    asyncio.run(run(_agent.definition(store, 2), _agent.request("warm-up", 0, 2)))


def zygote(kind: str, where: str, *, batching: bool = False) -> None:
    _warm_up()
    _say("ready")
    for command in sys.stdin:
        prefix, runs, steps = command.split()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            try:
                asyncio.run(drive(kind, where, prefix, int(runs), int(steps), batching=batching))
            finally:
                os._exit(0)
        _say(f"pid {pid}")
        os.waitpid(pid, 0)
        # The leading newline ends a line the killed process may have left half written.
        _say(f"\nreaped {pid}")


async def race(kind: str, where: str, run_id: str, label: str) -> None:
    store = open_store(kind, where)
    definition = _agent.definition(store, 3)
    request = _agent.request(run_id, 0, 3, who=label)
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        result = await run(definition, request)
    except PolyLoopError as error:
        print(f"lost {type(error).__name__}", flush=True)
    else:
        print(f"won {result.stop_reason.value}", flush=True)
    await close_store(store)


async def write(kind: str, where: str, prefix: str, runs: int, steps: int) -> None:
    store = open_store(kind, where)
    await asyncio.gather(*(write_run(store, f"{prefix}-{i}", steps) for i in range(runs)))
    await close_store(store)
    print("done", flush=True)


def _largest_file(where: str) -> int:
    sizes = [0]
    for root, _dirs, files in os.walk(where):
        sizes.extend(os.path.getsize(os.path.join(root, name)) for name in files)
    return max(sizes)


async def disk_full(kind: str, where: str) -> None:
    store = open_store(kind, where)
    await store.write_run_started(started("full"))
    acknowledged = 0
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG from write() instead of dying
    _soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    margin = 2048 if kind == "jsonl" else 6 * 4096  # sqlite appends whole WAL frames
    resource.setrlimit(resource.RLIMIT_FSIZE, (_largest_file(where) + margin, hard))
    error: BaseException | None = None
    for k in range(200):
        try:
            await store.write_intent(intent("full", IntentKind.MODEL_CALL, k))
        except Exception as caught:
            error = caught
            break
        acknowledged += 1
    log = await store.read_log("full")
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    # The write that failed, made again once the disk has room (the loop's order is kept).
    retried = intent("full", IntentKind.MODEL_CALL, acknowledged)
    await store.write_intent(retried)
    after = await store.read_log("full")
    await close_store(store)
    print(
        json.dumps(
            {
                "acknowledged": acknowledged,
                "error_type": None if error is None else type(error).__name__,
                "is_polyloop_error": isinstance(error, PolyLoopError),
                "message": str(error),
                "read_intents": len(log.intents),
                "read_started": log.started == started("full"),
                "intents_after_recovery": len(after.intents),
                "last_after_recovery": after.intents[-1] == retried,
            }
        ),
        flush=True,
    )


async def racer(kind: str, where: str, ledger: str, who: str) -> None:
    store = open_store(kind, where)
    _say("ready")
    while True:
        command = sys.stdin.readline()
        if not command:
            break
        mode, run_id = command.split()
        definition = _agent.ledger_definition(store, _agent.RACE_SCRIPT)
        request = _agent.ledger_request(run_id, _agent.ledger_tools(ledger, run_id, who))
        _say("set")
        sys.stdin.readline()
        outcome: dict[str, object] = {"outcome": "recorded", "error": None, "stop": None}
        try:
            result = await (run if mode == "run" else resume)(definition, request)
        except RunLeaseHeldError:
            outcome.update(outcome="refused", error="RunLeaseHeldError")
        except PolyLoopError as error:
            outcome.update(outcome="error", error=type(error).__name__)
        else:
            outcome["stop"] = result.stop_reason.value
            if _agent.drove(definition):
                outcome["outcome"] = "drove"
        _say(json.dumps(outcome))
    await close_store(store)


async def hold(kind: str, where: str, run_id: str, policy: str, ledger: str, leave: str) -> None:
    store = open_store(kind, where)
    definition = _agent.ledger_definition(store, _agent.hold_script(policy))
    tools = _agent.ledger_tools(ledger, run_id, "holder", hang=True, leave_child=leave)
    _say(f"pid {os.getpid()}")
    await run(definition, _agent.ledger_request(run_id, tools))


def main(argv: list[str]) -> None:
    command, kind, where, *rest = argv
    os.makedirs(where, exist_ok=True)
    if command == "drive":
        asyncio.run(drive(kind, where, rest[0], int(rest[1]), int(rest[2])))
    elif command == "race":
        asyncio.run(race(kind, where, rest[0], rest[1]))
    elif command == "write":
        asyncio.run(write(kind, where, rest[0], int(rest[1]), int(rest[2])))
    elif command == "zygote":
        zygote(kind, where)
    elif command == "zygote-batching":
        zygote(kind, where, batching=True)
    elif command == "disk-full":
        asyncio.run(disk_full(kind, where))
    elif command == "racer":
        asyncio.run(racer(kind, where, rest[0], rest[1]))
    elif command == "hold":
        asyncio.run(hold(kind, where, rest[0], rest[1], rest[2], rest[3]))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
