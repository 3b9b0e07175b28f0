"""A process that copies run ``source``'s first steps into forks ``copy-0``, ``copy-1``, ...
one after another with ``copy_records`` until the test SIGKILLs it (design 0072).

    python -m tests.stores._copy_child KIND WHERE STEPS

Prints ``copying N`` (flushed) before each copy starts.
"""

from __future__ import annotations

import asyncio
import sys

from polyloop.ports import RecordCopying
from tests.stores._helpers import open_store
from tests.stores.test_record_copying_sigkill import copied_records, fork_started


async def main(kind: str, where: str, steps: int) -> None:
    store = open_store(kind, where)
    assert isinstance(store, RecordCopying)
    records = copied_records(await store.read_log("source"), steps)
    number = 0
    while True:
        started = fork_started(f"copy-{number}", steps)
        lease = await store.acquire_run_lease(started.run_id)  # type: ignore[attr-defined]
        print(f"copying {number}", flush=True)
        assert await store.copy_records(started, "source", records)
        await lease.release()
        number += 1


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
