"""A process that forks run ``source`` at step 2 and dies mid-action (the test SIGKILLs it).

    python -m tests.core.session._fork_child KIND WHERE LEDGER

The fork's own first action (``read``, safe) writes its ledger line, prints ``in-action`` and
hangs until killed.
"""

from __future__ import annotations

import asyncio
import sys

from polyloop.session import fork
from tests.asking_kit import LedgerEffects
from tests.core.session.test_fork import fork_agent
from tests.stores._helpers import open_store


async def main(kind: str, where: str, ledger: str) -> None:
    store = open_store(kind, where)
    definition, request = fork_agent(store, LedgerEffects(ledger, hang_on="read"))
    await fork(definition, request, source_run_id="source", at_step=2)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
