"""One line per run, for pages that list thousands of runs (design 0070).

:func:`overview_of` says what ``polyloop runs`` says of a run (its status word, when it
started, the ask it waits on) from its log; :class:`RunOverviews` is the optional store
capability that answers a filtered page of those lines, or of the pending asks, from indexes
instead of reading every log; :func:`select_overviews` and :func:`select_pending` give the same
answer from lines computed by reading every log, for a store without it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol, TypeGuard, runtime_checkable

from polyloop.errors import ConfigurationError, CorruptLogError
from polyloop.ports import RunLog
from polyloop.recovery import (
    pending_ask,
    plan_resume,
    run_status,
    snapshot_facts,
    validate_log,
)

__all__ = [
    "OVERVIEW_STATUSES",
    "OverviewQuery",
    "RunOverview",
    "RunOverviews",
    "overview_of",
    "select_overviews",
    "select_pending",
    "supports_run_overviews",
]

#: The status words of an overview: ``polyloop runs``'s ``status`` of a run nobody drives now
#: (``running`` needs a look at the run's lease, which an overview never takes).
OVERVIEW_STATUSES = ("finished", "waiting_approval", "unfinished", "incomplete_fork", "corrupt")
_TOOLS_KEY = "request.tools"
_TOOL_PREFIX = "request.tools."
_REPLAY_SUFFIX = ".replay_policy"
_BINDING_PREFIX = "request.model_binding."


@dataclass(frozen=True, slots=True)
class RunOverview:
    """What a list of runs shows of one run."""

    run_id: str
    #: One of :data:`OVERVIEW_STATUSES`.
    status: str
    #: Seed 002's status word (``polyloop.recovery.RunStatus`` value); ``None`` when corrupt.
    run_status: str | None = None
    #: The stop reason of a finished run.
    stop_reason: str | None = None
    #: ``RunStarted.started_at``: UTC to the second, ``None`` in older logs.
    started_at: str | None = None
    #: The run's tools, by name, sorted (from its parameter snapshot).
    tools: tuple[str, ...] = ()
    #: The run's model binding (``RunRequest.model_binding``) as sorted (key, value) pairs.
    binding: tuple[tuple[str, str], ...] = ()
    #: Steps recorded; ``None`` when the log could not be read at all.
    steps: int | None = None
    #: The model client as ``polyloop runs`` shows it (``kind:model``).
    model: str = ""
    #: An unfinished run's tail: the recovery table's state (``polyloop.recovery.TailState``).
    tail: str | None = None
    #: The ask a ``waiting_approval`` run waits on: its step, kind, tool and time.
    ask_step: int | None = None
    ask_kind: str | None = None
    ask_tool: str | None = None
    asked_at: str | None = None


@dataclass(frozen=True, slots=True)
class OverviewQuery:
    """One page of overviews in run-id order: those after ``after`` (a run id; keyset paging)
    that match every filter given. An empty filter matches every run."""

    status: str = ""
    #: A tool the run has, by name.
    tool: str = ""
    #: A (key, value) pair of the run's model binding.
    binding: tuple[str, str] | None = None
    #: A substring of the run id.
    run_id_contains: str = ""
    after: str | None = None
    limit: int = 50

    def __post_init__(self) -> None:
        if self.status and self.status not in OVERVIEW_STATUSES:
            raise ConfigurationError(
                f"OverviewQuery status={self.status!r} is not a status word; use one of "
                f"{', '.join(OVERVIEW_STATUSES)} or '' for any."
            )
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ConfigurationError(
                f"OverviewQuery limit must be an int >= 1, got {self.limit!r}."
            )

    def matches(self, overview: RunOverview) -> bool:
        """Whether ``overview`` passes every filter (not the page's bounds)."""
        return (
            (not self.status or overview.status == self.status)
            and (not self.tool or self.tool in overview.tools)
            and (self.binding is None or self.binding in overview.binding)
            and self.run_id_contains in overview.run_id
        )


def _tools(snapshot: Mapping[str, str]) -> tuple[str, ...]:
    names: set[str] = set()
    listed = snapshot.get(_TOOLS_KEY)
    if listed is not None:
        try:
            decoded = json.loads(listed)
        except ValueError:
            decoded = None
        if isinstance(decoded, list):
            names.update(name for name in decoded if isinstance(name, str))
    for key in snapshot:
        if key.startswith(_TOOL_PREFIX) and key.endswith(_REPLAY_SUFFIX):
            names.add(key[len(_TOOL_PREFIX) : -len(_REPLAY_SUFFIX)])
    return tuple(sorted(names))


def overview_of(run_id: str, log: RunLog, damage: str | None = None) -> RunOverview:
    """The overview of run ``run_id`` from its log. ``damage``: why the store could not read
    it (then ``log`` is what was salvaged, if anything): the run is ``corrupt``.

    The status is ``polyloop runs``'s for a run whose lease nobody holds: ``corrupt`` when the
    log breaks its rules (``validate_log``), ``finished``, ``waiting_approval`` while an ask is
    pending, ``incomplete_fork`` for a fork whose copy a crash cut short (design 0072), else
    ``unfinished``.
    """
    if damage is not None and log == RunLog():
        return RunOverview(run_id, "corrupt")
    started = log.started
    snapshot: Mapping[str, str] = started.parameter_snapshot if started else {}
    model = snapshot.get("model_client.model") or snapshot.get("model_client.name") or ""
    kind = snapshot.get("model_client.kind", "")
    base = RunOverview(
        run_id,
        "corrupt",
        steps=len(log.steps),
        model=f"{kind}:{model}" if model else kind,
        started_at=None if started is None else started.started_at,
        tools=_tools(snapshot),
        binding=tuple(
            sorted(
                (key[len(_BINDING_PREFIX) :], value)
                for key, value in snapshot.items()
                if key.startswith(_BINDING_PREFIX)
            )
        ),
    )
    if damage is not None:
        return base
    try:
        validate_log(log, run_id)
    except CorruptLogError:
        return base
    word = run_status(log).value
    if log.finished is not None:
        reason = log.finished.result.stop_reason.value
        return replace(base, status="finished", run_status=word, stop_reason=reason)
    if (
        started is not None
        and started.forked_at_step is not None
        and len(log.steps) < started.forked_at_step
    ):
        return replace(base, status="incomplete_fork", run_status=word)
    facts = snapshot_facts(snapshot)
    limit = facts.max_consecutive_parse_failures
    plan = plan_resume(
        log,
        max_consecutive_parse_failures=2**31 if limit is None else limit,
        completing_tools=facts.completing_tools or (),
    )
    base = replace(base, tail=plan.state.value)
    ask = pending_ask(log)
    if ask is None:
        return replace(base, status="unfinished", run_status=word)
    return replace(
        base,
        status="waiting_approval",
        run_status=word,
        ask_step=ask.step,
        ask_kind=ask.kind.value,
        ask_tool=ask.tool_name,
        asked_at=ask.asked_at,
    )


def select_overviews(
    overviews: Iterable[RunOverview], query: OverviewQuery
) -> tuple[RunOverview, ...]:
    """The page ``query`` asks for, from the overviews of every run (any order)."""
    after = query.after
    chosen = sorted(
        (
            each
            for each in overviews
            if (after is None or each.run_id > after) and query.matches(each)
        ),
        key=lambda each: each.run_id,
    )
    return tuple(chosen[: query.limit])


def pending_key(overview: RunOverview) -> tuple[str, str]:
    """The order of the pending asks: oldest ask first, then by run id."""
    return (overview.asked_at or "", overview.run_id)


def select_pending(
    overviews: Iterable[RunOverview], after: tuple[str, str] | None = None, limit: int = 50
) -> tuple[RunOverview, ...]:
    """The ``waiting_approval`` overviews after ``after`` (an ``(asked_at, run_id)`` key), oldest
    ask first, at most ``limit``."""
    chosen = sorted(
        (
            each
            for each in overviews
            if each.status == "waiting_approval" and (after is None or pending_key(each) > after)
        ),
        key=pending_key,
    )
    return tuple(chosen[:limit])


@runtime_checkable
class RunOverviews(Protocol):
    """Optional RunStore capability: pages of run overviews from indexes (design 0070).

    Every answer equals what :func:`select_overviews` / :func:`select_pending` give from
    :func:`overview_of` of every run's log as ``read_log`` returns it (a log ``read_log``
    refuses with :class:`CorruptLogError` is ``corrupt``), including every write acknowledged
    before the call. Never blocks the event loop; raises :class:`polyloop.errors.StoreError`
    when the storage cannot be read.
    """

    async def run_overviews(self, query: OverviewQuery) -> tuple[RunOverview, ...]:
        """The page ``query`` asks for: at most ``query.limit`` overviews in run-id order."""
        ...

    async def pending_asks(
        self, after: tuple[str, str] | None = None, limit: int = 50
    ) -> tuple[RunOverview, ...]:
        """The runs waiting on an ask, oldest ask first (by ``(asked_at, run_id)``, after
        ``after``), at most ``limit``."""
        ...

    async def count_pending_asks(self) -> int:
        """How many runs wait on an ask."""
        ...


def supports_run_overviews(store: object) -> TypeGuard[RunOverviews]:
    """Whether ``store`` answers pages of run overviews itself (:class:`RunOverviews`)."""
    return isinstance(store, RunOverviews)
