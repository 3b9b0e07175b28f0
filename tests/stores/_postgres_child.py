"""Child processes of the postgres store's tests: ``python -m tests.stores._postgres_child``.

The server is ``POLYLOOP_TEST_POSTGRES_URL`` (inherited). Commands (positional arguments):

- ``hold SCHEMA RUN_ID``: take the run's lease, print ``held``, then wait for stdin to close
  (the parent kills this process while it holds the lease).
- ``hold-and-fork SCHEMA RUN_ID``: take the lease, write ``RunStarted``, fork a child that
  tries one write (a model-call intent) through the inherited store and then sleeps; write an
  action intent itself, print ``held <child pid> refused <error>`` (or ``... wrote``) and wait
  for stdin to close.
- ``write-many SCHEMA LABEL RUNS STEPS CONTESTED``: print ``ready``, wait for a line on stdin,
  then concurrently write RUNS whole runs ``LABEL-<i>`` and try to start the CONTESTED runs
  ``contested-<c>`` (whoever started one writes its whole log); print a JSON line listing the
  contested runs this process won.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from polyloop.errors import RunAlreadyStartedError, StoreError
from polyloop.stores.postgres import PostgresRunStore
from polyloop.types import IntentKind
from tests.stores._helpers import intent, model_result, started, step_completed, write_run
from tests.stores._postgres import server_url


async def hold(schema: str, run_id: str) -> None:
    store = PostgresRunStore(server_url(), schema=schema)
    await store.acquire_run_lease(run_id)
    print("held", flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await store.aclose()


def _forked_child(store: PostgresRunStore, run_id: str, report: int) -> None:
    """The forked child: it must neither use nor keep alive its parent's session."""
    try:
        asyncio.run(store.write_intent(intent(run_id, IntentKind.MODEL_CALL, 0)))
        outcome = "wrote"
    except StoreError as error:
        outcome = f"refused {type(error).__name__}"
    os.write(report, f"{outcome}\n".encode())
    os.close(report)
    time.sleep(60)
    os._exit(0)


async def hold_and_fork(schema: str, run_id: str) -> None:
    store = PostgresRunStore(server_url(), schema=schema)
    await store.acquire_run_lease(run_id)
    await store.write_run_started(started(run_id))
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        _forked_child(store, run_id, write_end)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        outcome = await asyncio.to_thread(pipe.readline)
    # The child's end of the fork must have left this session (and its lease) alone.
    await store.write_intent(intent(run_id, IntentKind.ACTION, 0))
    print(f"held {child} {outcome.strip()}", flush=True)
    await asyncio.to_thread(sys.stdin.read)
    await store.aclose()


async def _contest(store: PostgresRunStore, run_id: str, label: str, steps: int) -> bool:
    try:
        await store.write_run_started(started(run_id, who=label))
    except RunAlreadyStartedError:
        return False
    for k in range(steps):
        await store.write_intent(intent(run_id, IntentKind.MODEL_CALL, k))
        await store.write_model_call_result(model_result(run_id, k))
        await store.write_intent(intent(run_id, IntentKind.ACTION, k))
        await store.write_step_completed(step_completed(run_id, k))
    return True


async def write_many(schema: str, label: str, runs: int, steps: int, contested: int) -> None:
    store = PostgresRunStore(server_url(), schema=schema)
    await store.open()
    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    mine = [write_run(store, f"{label}-{i}", steps) for i in range(runs)]
    contests = [_contest(store, f"contested-{c}", label, steps) for c in range(contested)]
    outcomes = await asyncio.gather(*mine, *contests)
    won = [f"contested-{c}" for c, ok in enumerate(outcomes[runs:]) if ok]
    print(json.dumps({"won": won, "commits": store.commits}), flush=True)
    await store.aclose()


def main(argv: list[str]) -> None:
    command, *rest = argv
    if command == "hold":
        asyncio.run(hold(rest[0], rest[1]))
    elif command == "hold-and-fork":
        asyncio.run(hold_and_fork(rest[0], rest[1]))
    elif command == "write-many":
        schema, label, runs, steps, contested = rest
        asyncio.run(write_many(schema, label, int(runs), int(steps), int(contested)))
    else:
        raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
