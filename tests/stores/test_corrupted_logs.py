"""A corrupted log is refused wherever the records can tell, by every store, and `polyloop
verify` and `resume` agree on every one (issue 15, items 2 and 3).

One property over real logs (the writes of real runs: finished, unfinished, resumed) and all
four stores: delete, duplicate or swap one record, or edit one field of it, plant the result
in the store's own storage, then read it, verify it with the `polyloop` command and resume it.

- A sequence of records the loop could have written (a prefix of the real writes: a crash
  leaves one) is accepted; any other deletion, duplicate or swap is refused. The memory store
  keeps no order across record kinds, so there a swap across kinds is the same log.
- An edit the records can tell is refused; the others (the same-length text of a reply, a
  snapshot value, a failure's text: what a checksum would be needed for) may pass.
- `verify` calls a log corrupt exactly when the library does, and so does `resume`; only the
  in-doubt action's replay policy and the reply it would act on need the decision parser,
  which `resume` has and `verify` has not: there `resume` may refuse, writing nothing.
- A resume that goes on writes a log the library accepts, and resuming it again returns the
  same result.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import (
    CorruptLogError,
    PolyLoopError,
    RunNotFoundError,
    SnapshotMismatchError,
)
from polyloop.ports import RunLog
from polyloop.recovery import validate_log
from polyloop.serialization import LogRecord
from polyloop.session import resume
from polyloop_cli.main import main as polyloop_main
from tests.stores import _mutations, _postgres
from tests.stores._helpers import FILE_KINDS, STORE_KINDS
from tests.stores._mutations import EDITS, RUN_ID, SCENARIOS, Edit, grouped, recorded

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Mutation:
    """A changed copy of a scenario's writes, and what the library must make of it."""

    scenario: str
    description: str
    records: tuple[LogRecord, ...]
    #: ``True``: the log must be refused, wherever the store can tell.
    must_refuse: bool
    #: Only ``resume``, which parses the recorded reply, can tell.
    needs_parser: bool = False


@st.composite
def mutations(draw: st.DrawFn) -> Mutation:
    scenario = draw(st.sampled_from(SCENARIOS))
    log = recorded(scenario.name)
    last = len(log) - 1
    how = draw(st.sampled_from(("delete", "duplicate", "swap", "edit")))
    if how == "delete":
        index = draw(st.integers(0, last))
        return Mutation(
            scenario.name,
            f"delete #{index}",
            log[:index] + log[index + 1 :],
            must_refuse=index != last,
        )
    if how == "duplicate":
        index = draw(st.integers(0, last))
        at = draw(st.integers(index + 1, last + 1))
        records = (*log[:at], log[index], *log[at:])
        return Mutation(scenario.name, f"duplicate #{index} at {at}", records, must_refuse=True)
    if how == "swap":
        first = draw(st.integers(0, last - 1))
        second = draw(st.integers(first + 1, last))
        records = list(log)
        records[first], records[second] = records[second], records[first]
        return Mutation(scenario.name, f"swap #{first} #{second}", tuple(records), True)
    index = draw(st.integers(0, last))
    record = log[index]
    edit: Edit = draw(st.sampled_from([edit for edit in EDITS if edit.applies(record)]))
    if edit.name == "schema_version" and index == last:
        # An undecodable complete last line is item 1 of issue 15 (helper SEAM): today the
        # jsonl store takes it for a torn write.
        index, record = 0, log[0]
    records = (*log[:index], edit.change(record), *log[index + 1 :])
    return Mutation(
        scenario.name,
        f"edit #{index} ({type(record).__name__}): {edit.name}",
        records,
        must_refuse=edit.detected(record, log) is True,
        needs_parser=edit.needs_parser(record, log),
    )


def _prefix_of(records: Sequence[LogRecord], log: Sequence[LogRecord]) -> bool:
    return tuple(records) == tuple(log[: len(records)])


def _could_be_written(kind: str, planted: Sequence[LogRecord], log: Sequence[LogRecord]) -> bool:
    """Whether the planted records are what a crash of the real run can leave in this store."""
    if kind == "memory":
        return any(grouped(planted) == grouped(log[:end]) for end in range(len(log) + 1))
    return _prefix_of(planted, log)


async def _library_verdict(kind: str, where: str) -> tuple[RunLog | None, str | None]:
    """The log as the store reads it, and why the library refuses it (``None``: it does not)."""
    store = _mutations.reopen(kind, where)
    try:
        try:
            log = await store.read_log(RUN_ID)
        except CorruptLogError as error:
            return None, str(error)
        try:
            validate_log(log, RUN_ID)
        except CorruptLogError as error:
            return log, str(error)
        return log, None
    finally:
        await _mutations.release(kind, where, store)


def _verify(kind: str, where: str) -> tuple[int, str]:
    """Exit code and problem of `polyloop verify RUN_ID --json` on the storage."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            polyloop_main(
                ["verify", RUN_ID, "--store", _mutations.storage_url(kind, where), "--json"]
            )
        except SystemExit as done:
            code = int(done.code or 0)
    if not out.getvalue():
        return code, err.getvalue()
    runs = json.loads(out.getvalue())["runs"]
    return code, str(runs[0]["problem"])


@dataclass(frozen=True)
class _Resumed:
    outcome: str  # "corrupt", "config", "refused" or "resumed"
    detail: str
    log_before: RunLog | None
    log_after: RunLog | None


async def _resume(kind: str, where: str, scenario_name: str) -> _Resumed:
    scenario = next(each for each in SCENARIOS if each.name == scenario_name)
    before, _ = await _library_verdict(kind, where)
    store = _mutations.reopen(kind, where)
    try:
        try:
            result = await resume(scenario.definition(store), scenario.request())
        except (CorruptLogError, RunNotFoundError) as error:
            outcome, detail = "corrupt", str(error)
        except SnapshotMismatchError as error:
            outcome, detail = "config", str(error)
        except PolyLoopError as error:
            outcome, detail = "refused", str(error)
        else:
            outcome, detail = "resumed", result.stop_reason.value
            again = await resume(scenario.definition(store), scenario.request())
            assert result == again, "resuming a finished run returned another result"
    finally:
        await _mutations.release(kind, where, store)
    after, problem = await _library_verdict(kind, where)
    if outcome == "resumed":
        assert problem is None, f"resume wrote a log the library refuses: {problem}"
    return _Resumed(outcome, detail, before, after)


def _check(kind: str, mutation: Mutation) -> tuple[bool, str]:
    """Plant, read, verify and resume one mutation; return (refused, what resume did)."""
    with tempfile.TemporaryDirectory(prefix="polyloop-mutation-") as where:
        try:
            here = asyncio.run(_mutations.store_parameters(kind, where))
            log = _mutations.recorded_here(recorded(mutation.scenario), here)
            records = _mutations.recorded_here(mutation.records, here)
            planted = asyncio.run(_mutations.plant(kind, where, records))
            _, refusal = asyncio.run(_library_verdict(kind, where))
            what = f"{kind}, {mutation.scenario}, {mutation.description}"
            if _could_be_written(kind, planted, log):
                assert refusal is None, f"{what}: a log the loop could write was refused: {refusal}"
            elif mutation.must_refuse:
                assert refusal is not None, f"{what}: the corrupted log was accepted"
            if kind in FILE_KINDS:
                code, problem = _verify(kind, where)
                assert (refusal is not None) == (6 == code), f"{what}: verify {code} {problem}"
                assert code in (0, 6), f"{what}: verify exited {code}: {problem}"
            resumed = asyncio.run(_resume(kind, where, mutation.scenario))
            if refusal is not None:
                assert "corrupt" == resumed.outcome, f"{what}: resume {resumed}"
            elif mutation.needs_parser:
                assert resumed.outcome in ("resumed", "corrupt", "refused"), f"{what}: {resumed}"
            else:
                assert resumed.outcome in ("resumed", "config"), f"{what}: resume {resumed}"
            if resumed.outcome != "resumed":
                assert resumed.log_before == resumed.log_after, f"{what}: a refusal wrote"
            return refusal is not None, resumed.outcome
        finally:
            _mutations.forget(where)
            if kind == "postgres":
                _postgres.drop_used_schemas()


MUTATION_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("kind", STORE_KINDS)
@MUTATION_SETTINGS
@given(mutation=mutations())
def test_a_corrupted_log_is_refused_where_the_records_tell_and_verify_agrees_with_resume(
    kind: str, mutation: Mutation
) -> None:
    """Any one-record corruption of a real log: refused exactly as described above, by the
    store, `polyloop verify` and `resume` alike; a resume that goes on leaves a valid log."""
    _check(kind, mutation)


def test_every_scenario_is_a_log_the_library_accepts() -> None:
    """The unmutated writes of every scenario validate, end as the scenario says, and cover
    finished and unfinished logs."""
    finished = 0
    for scenario in SCENARIOS:
        log = grouped(recorded(scenario.name))
        validate_log(log, RUN_ID)
        recorded_reason = None if log.finished is None else log.finished.result.stop_reason
        assert scenario.reason == recorded_reason, scenario.name
        finished += log.finished is not None
    assert 0 < finished < len(SCENARIOS)


def test_the_mutations_cover_every_edit_and_every_kind_of_record() -> None:
    """Each edit applies to some record of some scenario, so none is dead code."""
    records = [record for scenario in SCENARIOS for record in recorded(scenario.name)]
    assert [] == [edit.name for edit in EDITS if not any(edit.applies(r) for r in records)]
    assert {"RunStarted", "Intent", "ModelCallResult", "StepCompleted", "RunFinished"} == {
        type(record).__name__ for record in records
    }
