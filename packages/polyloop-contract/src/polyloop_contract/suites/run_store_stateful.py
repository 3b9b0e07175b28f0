"""RunStore contract, stateful: hypothesis drives the store and a plain model of the logs side by side.

Runs are started, advanced one write at a time in the loop's order, finished, started or
finished a second time (which must be refused), read, and (when the store can be reopened)
reopened, in any interleaving hypothesis chooses. After every read the store must agree with
the model. The failure message names the rule and hypothesis prints the steps that led there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from polyloop.errors import RunAlreadyStartedError
from polyloop.ports import RunLog, RunStore
from polyloop.types import RunFinished, RunResult, StepCompleted, StepRecord, StopReason
from polyloop_contract import _report
from polyloop_contract._checks import CALL_TIMEOUT, HYPOTHESIS_PHASES, Rule, shown
from polyloop_contract._differences import describe, log_difference
from polyloop_contract._records import (
    LogModel,
    LogRecord,
    action_writes,
    method_for,
    model_failure_writes,
    parse_failure_writes,
    run_started,
    write,
)
from polyloop_contract.capabilities import StoreCapabilities
from polyloop_contract.fixtures import StoreFactory, StoreReopen
from polyloop_contract.suites._store_support import (
    SEAM,
    Reopen,
    StoreScope,
    make_reopener,
    make_store_maker,
    param_suffix,
)

T = TypeVar("T")

#: A small pool of run_ids, some alike, so that hypothesis reuses and confuses them.
RUN_IDS = ("a", "A", "b", "a/b", "a b", "ä")
UNKNOWN_IDS = ("never", "a ", "B")

STATEFUL_SETTINGS = settings(
    phases=HYPOTHESIS_PHASES,
    max_examples=25,
    stateful_step_count=30,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


class _Run:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.model = LogModel()
        self.pending: list[LogRecord] = []
        self.next_step = 0
        self.steps: list[StepRecord] = []

    @property
    def finished(self) -> bool:
        return self.model.finished


#: The steps ``advance`` chooses from: an action, a parse failure, a failed model call.
_STEP_VARIANTS = (action_writes, parse_failure_writes, model_failure_writes)


def test_store_matches_a_model_of_the_log(
    request: pytest.FixtureRequest,
    polyloop_store_factory: StoreFactory,
    polyloop_store_reopen: StoreReopen | None,
    polyloop_store_capabilities: StoreCapabilities,
) -> None:
    """Random interleavings of writes, refusals, reads and reopens agree with a model of the logs."""
    can_reopen = polyloop_store_capabilities.has("reopen") and polyloop_store_reopen is not None

    def reopener(scope: StoreScope) -> Reopen | None:
        if not can_reopen:
            return None
        return make_reopener(request, polyloop_store_reopen, polyloop_store_capabilities, scope)

    if not can_reopen:
        reason = polyloop_store_capabilities.off.get(
            "reopen", "no polyloop_store_reopen fixture was provided"
        )
        _report.note(
            request.config,
            f"NOTE the stateful RunStore rule ran without reopening the store{param_suffix(request)}: "
            f"{reason}",
        )
    check = Rule(SEAM, "store matches a model of the log")

    class StoreMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.loop = asyncio.new_event_loop()
            self.runs: dict[str, _Run] = {}
            self.writes = 0
            self.broken = False
            # Each example's stores are cleaned up (when the factory says how) at its end.
            self.scope = StoreScope()
            self.reopen = reopener(self.scope)
            self.store: RunStore = self._run(make_store_maker(polyloop_store_factory, self.scope)())

        def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
            try:
                return self.loop.run_until_complete(asyncio.wait_for(coroutine, CALL_TIMEOUT))
            except RunAlreadyStartedError:
                raise
            except BaseException:
                self.broken = True  # the teardown must not mask this failure with another
                raise

        def _write(self, record: LogRecord) -> None:
            self.writes += 1
            self._run(
                check.call(
                    f"{method_for(record)}({describe(record)}) of run {shown(record.run_id)}",
                    write(self.store, record),
                )
            )

        def _refused(self, record: LogRecord, what: str) -> None:
            refusal = Rule(SEAM, f"second {what} refused")
            try:
                self._run(write(self.store, record))
            except RunAlreadyStartedError:
                return
            except Exception as error:
                self.broken = True
                refusal.fail(
                    f"a second {what} for run {shown(record.run_id)} raised {type(error).__name__}: "
                    f"{error}, not RunAlreadyStartedError"
                )
            self.broken = True
            refusal.fail(f"a second {what} for run {shown(record.run_id)} was accepted")

        def _compare(self, run_id: str) -> None:
            run = self.runs.get(run_id)
            expected = run.model.log() if run is not None else RunLog()
            log = self._run(check.call(f"read_log({shown(run_id)})", self.store.read_log(run_id)))
            difference = log_difference(expected, log)
            self.broken = self.broken or difference is not None
            check.check(
                difference is None,
                f"after {self.writes} writes in the order shown above, read_log({shown(run_id)}) "
                f"differs from the model: {difference}",
            )

        @initialize()
        def nothing_yet(self) -> None:
            self._compare("a")

        @rule(run_id=st.sampled_from(RUN_IDS))
        def start(self, run_id: str) -> None:
            record = run_started(run_id, **{"request.attempt": str(self.writes)})
            if run_id in self.runs:
                self._refused(record, "RunStarted")
                return
            self._write(record)
            run = self.runs[run_id] = _Run(run_id)
            run.model.add(record)

        @precondition(lambda self: any(not r.finished for r in self.runs.values()))
        @rule(data=st.data(), variant=st.integers(0, 2))
        def advance(self, data: st.DataObject, variant: int) -> None:
            open_runs = sorted(r for r, run in self.runs.items() if not run.finished)
            run = self.runs[data.draw(st.sampled_from(open_runs), label="run_id")]
            if not run.pending:
                run.pending = list(_STEP_VARIANTS[variant](run.run_id, run.next_step).records)
                run.next_step += 1
            record = run.pending.pop(0)
            self._write(record)
            run.model.add(record)
            if isinstance(record, StepCompleted):
                run.steps.append(record.step)

        @precondition(
            lambda self: any(not r.finished and not r.pending for r in self.runs.values())
        )
        @rule(data=st.data())
        def finish(self, data: st.DataObject) -> None:
            ready = sorted(
                r for r, run in self.runs.items() if not run.finished and not run.pending
            )
            run = self.runs[data.draw(st.sampled_from(ready), label="run_id")]
            record = RunFinished(
                run.run_id,
                RunResult(run.run_id, StopReason.STEP_BUDGET, None, tuple(run.steps)),
            )
            self._write(record)
            run.model.add(record)

        @precondition(lambda self: any(r.finished for r in self.runs.values()))
        @rule(data=st.data())
        def finish_again(self, data: st.DataObject) -> None:
            done = sorted(r for r, run in self.runs.items() if run.finished)
            run_id = data.draw(st.sampled_from(done), label="run_id")
            record = RunFinished(run_id, RunResult(run_id, StopReason.CANCELLED, "again", ()))
            self._refused(record, "RunFinished")

        @rule(run_id=st.sampled_from(RUN_IDS + UNKNOWN_IDS))
        def read(self, run_id: str) -> None:
            self._compare(run_id)

        @precondition(lambda self: self.reopen is not None)
        @rule()
        def reopen_store(self) -> None:
            assert self.reopen is not None
            self.store = self._run(self.reopen(self.store))

        @invariant()
        def runs_agree(self) -> None:
            # Comparing every run after every step is costly on slow stores; one is enough to
            # catch a divergence within a step or two, and the teardown checks them all.
            if self.runs:
                self._compare(sorted(self.runs)[self.writes % len(self.runs)])

        def teardown(self) -> None:
            try:
                if not self.broken:
                    for run_id in sorted(self.runs):
                        self._compare(run_id)
            finally:
                try:
                    self.loop.run_until_complete(self.scope.aclose())
                except Exception:
                    if not self.broken:  # a failure of the example itself is what to show
                        raise
                finally:
                    self.loop.close()

    run_state_machine_as_test(StoreMachine, settings=STATEFUL_SETTINGS)
