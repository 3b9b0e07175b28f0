"""The child process of the kit's SIGKILL lease rule: ``python -m polyloop_contract._lease_holder``.

It reads one line from stdin — base64 of a pickled ``(opener, run_id)`` — opens the store by
calling ``opener()`` (awaiting the result when it is awaitable), takes the lease of ``run_id``,
prints ``held <pid>`` and then holds it until it is killed (or stdin closes). Anything that goes
wrong is printed as ``failed <type>: <message>`` (one line) and ends the process with status 1.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import os
import pickle
import sys


def _say(line: str) -> None:
    sys.stdout.write(" ".join(line.split()) + "\n")
    sys.stdout.flush()


async def _hold(opener: object, run_id: str) -> None:
    assert callable(opener)
    store = opener()
    if inspect.isawaitable(store):
        store = await store
    lease = await store.acquire_run_lease(run_id)
    _say(f"held {os.getpid()}")
    # Keep the event loop running while holding (a server store's session may need it).
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)
    await lease.release()


def main() -> None:
    try:
        opener, run_id = pickle.loads(base64.b64decode(sys.stdin.buffer.readline()))
        asyncio.run(_hold(opener, run_id))
    except Exception as error:
        _say(f"failed {type(error).__name__}: {error}")
        sys.exit(1)


if __name__ == "__main__":
    main()
