"""The agent the console's tests start runs with and the console resumes them with
(``--agent tests.console._agents:agent``): asking_kit's gated tools, a scripted model, and a
ledger file that records every effect across processes (also those killed with SIGKILL)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from polyloop.batch import Episode, EpisodeAgent
from polyloop.ports import RunStore
from tests.asking_kit import LedgerEffects, definition, gated_request

#: The same refund asked twice (two asks alike but for their step, design 0059), then done.
TWO_REFUNDS = ('CALL refund {"amount": 80}', 'CALL refund {"amount": 80}', "CALL submit {}")
#: One refund, then done.
ONE_REFUND = ('CALL refund {"amount": 80}', "CALL submit {}")
#: Markup and control characters in what a person reads: the question and its arguments.
HOSTILE_QUESTION = '<script>alert(1)</script><img src=x onerror="alert(2)"> \x1b[31mred\x1b[0m'


def build(run_id: str, store: RunStore, ledger: str, script: Sequence[str], hang_on: str = ""):  # type: ignore[no-untyped-def]
    effects = LedgerEffects(ledger, hang_on)
    return definition(list(script), store), gated_request(run_id, effects)


@contextlib.asynccontextmanager
async def agent(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
    """Episode data: ``ledger`` (path), ``script`` (the model's replies), ``hang_on`` (an
    effect after which the process hangs, to be killed)."""
    data = episode.data
    built = build(
        episode.run_id,
        store,
        str(data["ledger"]),
        [str(line) for line in data.get("script", TWO_REFUNDS)],
        str(data.get("hang_on", "")),
    )
    yield EpisodeAgent(*built)
