"""Child processes of the gated SIGKILL and race tests: ``python -m tests.stores._gated_child``.

- ``drive KIND WHERE RUN_ID LEDGER HANG_ON [STOP_AT]``: drive the gated scenario
  (tests.asking_kit) to its end, deciding every ask, printing ``begin <method> <step>`` before
  and ``w <method> <step>`` after every store write; effects go to the LEDGER file; the effect
  named HANG_ON (``-``: none) prints ``in-action`` and hangs. Having printed the line STOP_AT,
  it hangs there too: the parent's SIGKILL lands at exactly that point, however late it comes
  (a busy machine would otherwise let the child write on past it).
- ``decide KIND WHERE RUN_ID VERDICT``: print ``ready``, wait for a line on stdin, then approve
  (VERDICT ``approve``) or reject the pending ask, waiting up to 20 s for the lease; print
  ``won`` or ``lost <error type>``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping

from polyloop.errors import PolyLoopError
from polyloop.ports import LeaseHolder, RunLease, RunLog, RunStore
from polyloop.session import approve, read_pending_ask, reject
from tests.asking_kit import LedgerEffects, drive_gated
from tests.stores._helpers import close_store, open_store

#: The line after which the child hangs until it is killed (``drive``'s STOP_AT).
_STOP_AT: list[str] = []


def _say(line: str) -> None:
    os.write(sys.stdout.fileno(), (line + "\n").encode())
    if line in _STOP_AT:
        # Blocks the event loop on purpose: nothing more may be written before the kill.
        time.sleep(3600)


def _step_of(record: object) -> int:
    for name in ("step", "call_index"):
        value = getattr(record, name, None)
        if isinstance(value, int):
            return value
    step = getattr(record, "step", None)
    return getattr(step, "step_idx", -1)


class PrintingStore:
    """Forwards everything to the store it wraps, announcing each write before and after."""

    def __init__(self, inner: RunStore) -> None:
        self.inner = inner

    async def _write(self, method: str, record: object) -> None:
        _say(f"begin {method} {_step_of(record)}")
        await getattr(self.inner, method)(record)
        _say(f"w {method} {_step_of(record)}")

    async def write_run_started(self, record: object) -> None:
        await self._write("write_run_started", record)

    async def write_intent(self, record: object) -> None:
        await self._write("write_intent", record)

    async def write_model_call_result(self, record: object) -> None:
        await self._write("write_model_call_result", record)

    async def write_step_completed(self, record: object) -> None:
        await self._write("write_step_completed", record)

    async def write_run_finished(self, record: object) -> None:
        await self._write("write_run_finished", record)

    async def write_user_asked(self, record: object) -> None:
        await self._write("write_user_asked", record)

    async def write_user_answered(self, record: object) -> None:
        await self._write("write_user_answered", record)

    async def read_log(self, run_id: str) -> RunLog:
        return await self.inner.read_log(run_id)

    async def acquire_run_lease(self, run_id: str) -> RunLease:
        return await self.inner.acquire_run_lease(run_id)  # type: ignore[attr-defined, no-any-return]

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        return await self.inner.run_lease_holder(run_id)  # type: ignore[attr-defined, no-any-return]

    def parameters(self) -> Mapping[str, str]:
        return self.inner.parameters()


async def _drive(
    kind: str, where: str, run_id: str, ledger: str, hang_on: str, stop_at: str = ""
) -> None:
    if stop_at:
        _STOP_AT.append(stop_at)
    store = open_store(kind, where)
    try:
        effects = LedgerEffects(ledger, "" if hang_on == "-" else hang_on)
        result = await drive_gated(PrintingStore(store), run_id, effects, started=False)
        _say(f"done {result.stop_reason.value}")
    finally:
        await close_store(store)


async def _decide(kind: str, where: str, run_id: str, verdict: str) -> None:
    store = open_store(kind, where)
    try:
        ask = await read_pending_ask(store, run_id)
        assert ask is not None
        _say("ready")
        await asyncio.to_thread(sys.stdin.readline)
        try:
            if verdict == "approve":
                await approve(
                    store,
                    run_id,
                    step=ask.step,
                    arguments_sha256=ask.arguments_sha256,
                    lease_wait_seconds=20,
                )
            else:
                await reject(
                    store,
                    run_id,
                    reason="no",
                    step=ask.step,
                    arguments_sha256=ask.arguments_sha256,
                    lease_wait_seconds=20,
                )
        except PolyLoopError as error:
            _say(f"lost {type(error).__name__}")
        else:
            _say("won")
    finally:
        await close_store(store)


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "drive":
        asyncio.run(_drive(*args))
    elif command == "decide":
        asyncio.run(_decide(*args))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
