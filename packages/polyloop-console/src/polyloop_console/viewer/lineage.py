"""A fork's lineage as its pages show it (design 0071): its source run and fork step, the runs
before that (a fork of a fork is a chain), the parameters in which it differs from its source,
and where each of those runs' pages is.

Read from the store the fork is in; a source that is not there (another store, deleted) is
named without a link, and the side-by-side page is not made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from polyloop.errors import PolyLoopError
from polyloop.ports import RunLog, RunStore
from polyloop.session import SnapshotDifference, parameter_differences
from polyloop_cli.commands.lineage import fork_fields

__all__ = ["MAX_CHAIN", "ComparePage", "Lineage", "Link", "read_lineage"]

#: How many runs back a chain of forks is followed (a longer one is cut, and said so).
MAX_CHAIN = 50


@dataclass(frozen=True, slots=True)
class Link:
    """One run of a fork's chain: ``run_id``, of which the run after it in the chain is a
    fork at ``at_step``."""

    run_id: str
    at_step: int
    #: Its page (``None``: not in this store, or no page was made for it).
    href: str | None
    #: Why the run is not shown: ``""`` when the store holds it, else in words.
    missing: str = ""


@dataclass(frozen=True, slots=True)
class Lineage:
    """Where a fork comes from."""

    source_run_id: str
    #: The fork step K: steps ``0..K-1`` are the source's, copied (inherited).
    at_step: int
    #: The source first, then the source's source, … (``chain[0].run_id == source_run_id``).
    chain: tuple[Link, ...]
    #: ``show``'s lines about the fork: source and step, the environment, a step in doubt,
    #: an incomplete copy.
    fields: tuple[tuple[str, str], ...]
    #: The parameters whose values differ from the source's (empty when it is not in the
    #: store: then :attr:`source` is ``None``).
    differences: tuple[SnapshotDifference, ...]
    #: The source's log, when the store holds it.
    source: RunLog | None
    #: The chain was longer than :data:`MAX_CHAIN` (or came back on itself) and was cut.
    cut: bool = False
    #: The fork's copy is whole (``False``: a crash cut it short; `polyloop fork` completes it).
    whole: bool = True


@dataclass(frozen=True, slots=True)
class ComparePage:
    """What the side-by-side page of a fork shows."""

    fork_id: str
    fork: RunLog
    #: The source's log (``lineage.source``, which the page needs).
    source: RunLog
    lineage: Lineage
    store: str
    #: The fork's own page (``None``: none).
    fork_href: str | None = None
    #: Where the store-wide list is (``None``: no list).
    index_href: str | None = None


async def read_lineage(
    store: RunStore, log: RunLog, href: Callable[[str], str | None] = lambda run_id: None
) -> Lineage | None:
    """The lineage of the run whose log is ``log``, reading its sources from ``store``;
    ``None`` for a run that is no fork. ``href(run_id)``: where a run's page is."""
    started = log.started
    if started is None or started.forked_from_run_id is None:
        return None
    assert started.forked_at_step is not None
    chain: list[Link] = []
    seen = {started.run_id}
    source_log: RunLog | None = None
    run_id, at = started.forked_from_run_id, started.forked_at_step
    cut = False
    while True:
        if run_id in seen or len(chain) == MAX_CHAIN:
            cut = True
            break
        seen.add(run_id)
        try:
            read = await store.read_log(run_id)
        except PolyLoopError:
            chain.append(Link(run_id, at, href(run_id), "its log cannot be read whole"))
            break
        if read.started is None:
            chain.append(Link(run_id, at, None, "not in this store"))
            break
        chain.append(Link(run_id, at, href(run_id)))
        if source_log is None:
            source_log = read
        before = read.started
        if before is None or before.forked_from_run_id is None or before.forked_at_step is None:
            break
        run_id, at = before.forked_from_run_id, before.forked_at_step
    differences = (
        ()
        if source_log is None or source_log.started is None
        else parameter_differences(
            source_log.started.parameter_snapshot, started.parameter_snapshot
        )
    )
    return Lineage(
        started.forked_from_run_id,
        started.forked_at_step,
        tuple(chain),
        tuple((name, str(value)) for name, value in fork_fields(log)),
        differences,
        source_log,
        cut,
        len(log.steps) >= started.forked_at_step,
    )
