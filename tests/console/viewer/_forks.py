"""A store holding a run, a fork of it and a fork of that fork, made by the library's ``fork``
with the batch tests' agent (``tests.batch._agents``), whose texts carry markup.

- ``r-1``: look 0, pay 1, look 2, then the final answer (step 3);
- ``f-1``: a fork of ``r-1`` at step 2 by an agent that takes 5 calls (look 2, pay 3, look 4,
  final 5), its pay carrying :data:`HOSTILE_NOTE`, its binding :data:`HOSTILE_VARIANT`;
- ``f-2``: a fork of ``f-1`` at step 4 by an agent that takes 6 calls (look 4, pay 5, final 6).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from pathlib import Path

from polyloop.batch import Episode
from polyloop.session import fork, run
from polyloop.stores.sqlite import SqliteRunStore
from tests.batch._agents import build

#: Markup and an ANSI escape in the fork's pay arguments (its action and the reply).
HOSTILE_NOTE = "</pre><script>window.__pwned = 1</script>\x1b[31m<img src=x onerror=alert(1)>"
#: Markup in the fork's model binding: a parameter difference.
HOSTILE_VARIANT = "<script>window.__pwned = 2</script>"


async def _make(path: Path) -> None:
    async with SqliteRunStore(path) as store:
        source = build(Episode("r-1", {"steps": 3}), store)
        await run(source.definition, source.request)
        first = build(
            Episode("f-1", {"steps": 5, "variant": HOSTILE_VARIANT, "note": HOSTILE_NOTE}), store
        )
        await fork(first.definition, first.request, source_run_id="r-1", at_step=2)
        second = build(Episode("f-2", {"steps": 6, "variant": "c"}), store)
        await fork(second.definition, second.request, source_run_id="f-1", at_step=4)


def forked_store(path: Path) -> str:
    """Make the store at ``path``; its URL. (In a thread of its own: playwright's sync API
    keeps an event loop running in the test's.)"""
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, _make(path)).result()
    return f"sqlite://{path}"
