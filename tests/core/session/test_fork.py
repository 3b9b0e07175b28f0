"""``fork``: a new run from step K of a recorded one, with another agent (design 0067).

On all four stores (memory, jsonl, sqlite and PostgreSQL, each reopened as a new process would
between the source and the fork): the fork's log reproduces the source's prefix record for
record, nothing of the prefix is executed again (an effects ledger counts what really ran), the
new model's first prompt is the source's prompt at step K, a last step in doubt needs an
explicit choice, forks of forks, resume of a fork, and a fork whose one write a crash cut short
is refused by resume and completed by forking again.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import ConfigurationError, PolyLoopError, RunAlreadyStartedError
from polyloop.ports import Action, ModelCall, RunLog, RunStore
from polyloop.recovery import RunStatus, run_status, validate_log
from polyloop.serialization import LogRecord
from polyloop.session import (
    AgentDefinition,
    RunRequest,
    fork,
    parameter_differences,
    resume,
    run,
)
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import (
    LineDecisionParser,
    RecordingEventSink,
    ScriptedModelClient,
)
from polyloop.tools import ToolRegistry
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Budget,
    IntentKind,
    RunResult,
    StopReason,
)
from tests.loop_kit import (
    SCENARIO,
    SYNTHETIC,
    Crash,
    CrashingStore,
    DatedClock,
    Effects,
    MixedExecutor,
    make_request,
    replies,
    scenario_tools,
)
from tests.stores import _postgres
from tests.stores._helpers import STORE_KINDS, close_store, open_store

pytestmark = [pytest.mark.crash]

_postgres.claim_session_prefix()

SOURCE = "source"
#: The scenario's source crashes right after the action intent of step 1 (``read``, safe), so
#: its resume executes that action (it never ran): a crashed-and-resumed run of six steps.
CRASH_AFTER = 8


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    yield
    _postgres.drop_used_schemas()


@dataclasses.dataclass
class Stores:
    """Opens store objects of one kind on one storage, as separate processes would."""

    kind: str
    where: str
    opened: list[RunStore] = dataclasses.field(default_factory=list)
    memory: MemoryRunStore | None = None

    def open(self) -> RunStore:
        if self.kind == "memory":
            if self.memory is None:
                self.memory = MemoryRunStore()
            return self.memory
        store = open_store(self.kind, self.where)
        self.opened.append(store)
        return store


@pytest.fixture(params=STORE_KINDS)
async def stores(request: pytest.FixtureRequest, tmp_path: object) -> AsyncIterator[Stores]:
    opened = Stores(request.param, str(tmp_path))
    yield opened
    for store in opened.opened:
        await close_store(store)
    if opened.memory is not None:
        await close_store(opened.memory)


def _definition(script: Sequence[object], store: object, *, name: str) -> AgentDefinition:
    return AgentDefinition(
        model_client=ScriptedModelClient(script, by_call_index=True, name=name),  # type: ignore[arg-type]
        decision_parser=LineDecisionParser(),
        store=store,  # type: ignore[arg-type]
        event_sink=RecordingEventSink(),
        synthetic_observations=SYNTHETIC,
    )


def _request(run_id: str, effects: Effects, *, max_steps: int = 20) -> RunRequest:
    tools = scenario_tools(effects)
    return make_request(
        run_id,
        tools=tools,
        executor=MixedExecutor(tools, effects),
        budget=Budget(
            max_steps=max_steps,
            max_actions=20,
            max_consecutive_parse_failures=3,
            max_prompt_chars=1_000_000,
        ),
    )


def _calls(*definitions: AgentDefinition) -> dict[int, ModelCall]:
    seen: dict[int, ModelCall] = {}
    for definition in definitions:
        for call in definition.model_client.calls:  # type: ignore[attr-defined]
            seen[call.call_index] = call
    return seen


async def _crashed_and_resumed_source(stores: Stores, effects: Effects) -> dict[int, ModelCall]:
    """Run the scenario as ``SOURCE``, crash it, resume it to its end; its model calls."""
    first = _definition(replies(*SCENARIO), CrashingStore(stores.open(), CRASH_AFTER), name="a")
    with pytest.raises(Crash):
        await run(first, _request(SOURCE, effects))
    second = _definition(replies(*SCENARIO), stores.open(), name="a")
    result = await resume(second, _request(SOURCE, effects))
    assert StopReason.TASK_COMPLETED == result.stop_reason
    assert 6 == len(result.steps)
    return _calls(first, second)


def _prefix(log: RunLog, k: int, run_id: str) -> tuple[list[object], ...]:
    """The records of steps ``0..k-1`` of ``log``, under ``run_id``."""

    def moved(record: object) -> object:
        return dataclasses.replace(record, run_id=run_id)  # type: ignore[type-var]

    return (
        [moved(i) for i in log.intents if i.call_index < k],
        [moved(r) for r in log.model_results if int(r.result_id.rsplit("-", 1)[-1]) < k],
        [moved(s) for s in log.steps if s.step.step_idx < k],
        [moved(a) for a in log.asks if a.step < k],
        [moved(a) for a in log.answers if a.step < k],
    )


def _new_agent(k: int, text: str = "FINAL: forked") -> list[object]:
    """A script that answers only call ``k``: the fork must never call the model before it."""
    return [
        *([RuntimeError("the fork called the model for a step of its prefix")] * k),
        *replies(*([text] * (k + 1)))[k:],
    ]


async def test_a_fork_at_every_step_reproduces_the_prefix_and_executes_none_of_it(
    stores: Stores,
) -> None:
    effects = Effects()
    source_calls = await _crashed_and_resumed_source(stores, effects)
    executed = dict(effects.counts)
    assert {"write": 1, "read": 1, "code": 1, "submit": 1} == executed
    source_log = await stores.open().read_log(SOURCE)
    for k in range(6):
        fork_id = f"fork-{k}"
        definition = _definition(_new_agent(k), stores.open(), name="b")
        result = await fork(definition, _request(fork_id, effects), source_run_id=SOURCE, at_step=k)
        assert isinstance(result, RunResult)
        assert StopReason.AGENT_FINISHED == result.stop_reason
        assert executed == dict(effects.counts), f"the fork at {k} executed something again"
        calls = definition.model_client.calls  # type: ignore[attr-defined]
        assert [k] == [call.call_index for call in calls]
        assert source_calls[k].messages == calls[0].messages
        log = await stores.open().read_log(fork_id)
        validate_log(log, fork_id)
        assert _prefix(source_log, k, fork_id) == _prefix(log, k, fork_id)
        assert k + 1 == len(log.steps)
        assert log.started is not None
        assert (SOURCE, k, False) == (
            log.started.forked_from_run_id,
            log.started.forked_at_step,
            log.started.fork_left_in_doubt,
        )
        assert source_log.started is not None
        differences = parameter_differences(
            source_log.started.parameter_snapshot, log.started.parameter_snapshot
        )
        triples = [(d.key, d.source, d.fork) for d in differences]
        assert ("model_client.name", "a", "b") in triples
        assert {"model_client.name", "model_client.entries"} >= {d.key for d in differences}
    # the source is only read
    assert source_log == await stores.open().read_log(SOURCE)


async def test_a_step_after_the_end_or_not_yet_taken_is_refused_with_nothing_written(
    stores: Stores,
) -> None:
    effects = Effects()
    await _crashed_and_resumed_source(stores, effects)
    for k, words in ((6, "ends a run (task_completed)"), (8, "6 completed step(s)")):
        with pytest.raises(ConfigurationError, match=r"cannot be forked at step") as refused:
            await fork(
                _definition(_new_agent(k), stores.open(), name="b"),
                _request("late", effects),
                source_run_id=SOURCE,
                at_step=k,
            )
        assert words in str(refused.value)
        assert RunLog() == await stores.open().read_log("late")


async def test_a_never_action_in_doubt_is_refused_unless_chosen_and_stays_unexecuted(
    stores: Stores,
) -> None:
    effects = Effects()
    # crash right after the action intent of step 0 (write, never): the write never ran
    first = _definition(replies(*SCENARIO), CrashingStore(stores.open(), 4), name="a")
    with pytest.raises(Crash):
        await run(first, _request(SOURCE, effects))
    stopped = await resume(
        _definition(replies(*SCENARIO), stores.open(), name="a"), _request(SOURCE, effects)
    )
    assert StopReason.RESUME_STATE_UNKNOWN == stopped.stop_reason
    assert 0 == effects.counts["write"]
    with pytest.raises(ConfigurationError, match=r"step 0: its action \(replay policy 'never'\)"):
        await fork(
            _definition(_new_agent(1), stores.open(), name="b"),
            _request("doubt", effects),
            source_run_id=SOURCE,
            at_step=1,
        )
    assert RunLog() == await stores.open().read_log("doubt")
    definition = _definition(_new_agent(1), stores.open(), name="b")
    result = await fork(
        definition,
        _request("doubt", effects),
        source_run_id=SOURCE,
        at_step=1,
        in_doubt_observation="Unknown whether the file was written.",
    )
    assert isinstance(result, RunResult)
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert 0 == effects.counts["write"]  # still never executed
    log = await stores.open().read_log("doubt")
    validate_log(log, "doubt")
    assert log.started is not None
    assert log.started.fork_left_in_doubt
    step0 = log.steps[0]
    assert ActionStatus.NOT_EXECUTED == step0.step.action_status
    assert "write" == step0.step.tool_name
    assert "Unknown whether the file was written." == step0.step.observation
    assert step0.step.observation_is_synthetic
    assert [IntentKind.MODEL_CALL, IntentKind.ACTION, IntentKind.MODEL_CALL] == [
        i.kind for i in log.intents
    ]
    # the new model reads the chosen observation for the step in doubt
    texts = [
        block.text
        for message in definition.model_client.calls[0].messages  # type: ignore[attr-defined]
        for block in message.content
    ]
    assert "Observation: Unknown whether the file was written." in texts
    # a fork at 0 needs no choice: nothing of the step in doubt is copied
    zero = await fork(
        _definition(_new_agent(0), stores.open(), name="b"),
        _request("zero", effects),
        source_run_id=SOURCE,
        at_step=0,
    )
    assert isinstance(zero, RunResult)
    assert 1 == len(zero.steps)


async def test_a_fork_of_a_fork_copies_its_source_and_repeats_none_of_its_actions(
    stores: Stores,
) -> None:
    effects = Effects()
    await _crashed_and_resumed_source(stores, effects)
    # the first fork takes its own action at step 3 (read), then answers
    first = _definition(
        [*_new_agent(3, "CALL read {}")[:4], *replies(*["FINAL: one"] * 5)[4:]],
        stores.open(),
        name="b",
    )
    one = await fork(first, _request("f1", effects), source_run_id=SOURCE, at_step=3)
    assert isinstance(one, RunResult)
    assert StopReason.AGENT_FINISHED == one.stop_reason
    executed = dict(effects.counts)
    assert 2 == executed["read"]
    second = _definition(_new_agent(4, "FINAL: two"), stores.open(), name="c")
    two = await fork(second, _request("f2", effects), source_run_id="f1", at_step=4)
    assert isinstance(two, RunResult)
    assert StopReason.AGENT_FINISHED == two.stop_reason
    assert executed == dict(effects.counts)
    f1 = await stores.open().read_log("f1")
    f2 = await stores.open().read_log("f2")
    validate_log(f2, "f2")
    assert f2.started is not None
    assert ("f1", 4) == (
        f2.started.forked_from_run_id,
        f2.started.forked_at_step,
    )
    assert _prefix(f1, 4, "f2") == _prefix(f2, 4, "f2")
    assert "CALL read {}" == f2.steps[3].step.raw_output
    assert "FINAL: two" == f2.steps[4].step.raw_output


async def test_a_crashed_fork_resumes_by_the_ordinary_rules(stores: Stores) -> None:
    effects = Effects()
    await _crashed_and_resumed_source(stores, effects)
    script = [*_new_agent(2, "CALL read {}")[:3], *replies(*["x"] * 3, "FINAL: done")[3:]]
    # the fork's one write (no batching through this wrapper: one write per record) is 1 +
    # 2 steps x 4 records + the model intent of step 2 = 10 writes; die after the action intent
    # of step 2 (read, safe) was written: resume executes it again, as for any run
    crashing = CrashingStore(stores.open(), 1 + 8 + 3)
    with pytest.raises(Crash):
        await fork(
            _definition(script, crashing, name="b"),
            _request("f", effects),
            source_run_id=SOURCE,
            at_step=2,
        )
    before = dict(effects.counts)
    result = await resume(_definition(script, stores.open(), name="b"), _request("f", effects))
    assert StopReason.AGENT_FINISHED == result.stop_reason
    assert before["read"] + 1 == effects.counts["read"]
    log = await stores.open().read_log("f")
    validate_log(log, "f")
    assert IntentKind.ACTION == log.steps[2].replayed_on_resume
    assert log.started is not None
    assert 2 == log.started.forked_at_step
    # a fork is started once
    with pytest.raises(RunAlreadyStartedError):
        await fork(
            _definition(script, stores.open(), name="b"),
            _request("f", effects),
            source_run_id=SOURCE,
            at_step=2,
        )


class CutBatchStore:
    """A real store whose next ``write_records`` keeps only its first ``keep`` records, then
    dies (:class:`Crash`): what a crash may leave of a batch (the contract promises a prefix)."""

    #: Hidden (a protocol member set to ``None`` is absent): the fork then writes its copy with
    #: ``write_records``, whose cut this store makes. A copy by ``copy_records`` is cut by
    #: killing a process in ``tests/stores/test_fork_copy.py``.
    copy_records = None

    def __init__(self, inner: RunStore, keep: int) -> None:
        self.inner = inner
        self.keep = keep

    async def write_records(self, records: Sequence[LogRecord]) -> None:
        await self.inner.write_records(records[: self.keep])  # type: ignore[attr-defined]
        raise Crash(f"the batch was cut after {self.keep} of {len(records)} records")

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


#: The start time the first, cut-short try of a fork records (design 0061).
FIRST_TRY = "2001-01-01T00:00:00+00:00"
SECOND_TRY = "2002-02-02T02:02:02+00:00"


async def test_a_fork_cut_short_is_refused_by_resume_and_completed_by_forking_again(
    stores: Stores,
) -> None:
    effects = Effects()
    await _crashed_and_resumed_source(stores, effects)
    whole = 1 + 3 * 4  # RunStarted and steps 0..2, four records each
    executed = dict(effects.counts)
    for keep in (0, 1, 6, whole - 1, whole):
        fork_id = f"cut-{keep}"
        with pytest.raises(Crash):
            await fork(
                _definition(_new_agent(3), CutBatchStore(stores.open(), keep), name="b"),
                _request(fork_id, effects),
                source_run_id=SOURCE,
                at_step=3,
                clock=DatedClock(FIRST_TRY),
            )
        left = await stores.open().read_log(fork_id)
        # a copy cut short has not started the fork; a whole one with no step of its own
        # waits for resume like any run that crashed (design 0072)
        assert (RunStatus.CREATED if keep < whole else RunStatus.RUNNING) is run_status(left)
        if keep == 0:
            assert RunLog() == left
        elif keep < whole:
            with pytest.raises(PolyLoopError, match="cut short"):
                await resume(
                    _definition(_new_agent(3), stores.open(), name="b"),
                    _request(fork_id, effects),
                )
        else:
            resumed = await resume(
                _definition(_new_agent(3), stores.open(), name="b"), _request(fork_id, effects)
            )
            assert StopReason.AGENT_FINISHED == resumed.stop_reason
            continue
        result = await fork(
            _definition(_new_agent(3), stores.open(), name="b"),
            _request(fork_id, effects),
            source_run_id=SOURCE,
            at_step=3,
            clock=DatedClock(SECOND_TRY),
        )
        assert isinstance(result, RunResult)
        assert StopReason.AGENT_FINISHED == result.stop_reason
        log = await stores.open().read_log(fork_id)
        validate_log(log, fork_id)
        assert 4 == len(log.steps)
        # completed with the records it began with: the start time of the first try (a try
        # that wrote nothing left none)
        assert log.started is not None
        assert (FIRST_TRY if keep else SECOND_TRY) == log.started.started_at
    assert executed == dict(effects.counts)
    # a finished fork is not started twice
    with pytest.raises(RunAlreadyStartedError):
        await fork(
            _definition(_new_agent(3), stores.open(), name="b"),
            _request(f"cut-{whole}", effects),
            source_run_id=SOURCE,
            at_step=3,
        )


def _source_on_memory(crash_after: int) -> tuple[MemoryRunStore, Effects, dict[int, ModelCall]]:
    store = MemoryRunStore()
    effects = Effects()

    async def drive() -> dict[int, ModelCall]:
        first = _definition(replies(*SCENARIO), CrashingStore(store, crash_after), name="a")
        with contextlib.suppress(Crash):
            await run(first, _request(SOURCE, effects))
        second = _definition(replies(*SCENARIO), store, name="a")
        await resume(second, _request(SOURCE, effects))
        return _calls(first, second)

    return store, effects, asyncio.run(drive())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crash_after=st.integers(min_value=1, max_value=26), data=st.data())
def test_any_fork_point_of_any_crashed_run_repeats_nothing(
    crash_after: int, data: st.DataObject
) -> None:
    """Random crash points of the source, random fork points: the fork's prefix is the
    source's, its first prompt the source's at K, and nothing ran again."""
    store, effects, source_calls = _source_on_memory(crash_after)
    source_log = asyncio.run(store.read_log(SOURCE))
    completed = len(source_log.steps)
    ended = source_log.finished is not None and source_log.finished.result.stop_reason in (
        StopReason.TASK_COMPLETED,
        StopReason.AGENT_FINISHED,
    )
    k = data.draw(st.integers(min_value=0, max_value=completed - 1 if ended else completed))
    executed = dict(effects.counts)
    definition = _definition(_new_agent(k), store, name="b")
    result = asyncio.run(fork(definition, _request("f", effects), source_run_id=SOURCE, at_step=k))
    assert isinstance(result, RunResult)
    assert executed == dict(effects.counts)
    log = asyncio.run(store.read_log("f"))
    validate_log(log, "f")
    assert _prefix(source_log, k, "f") == _prefix(log, k, "f")
    if k in source_calls:
        call = definition.model_client.calls[0]  # type: ignore[attr-defined]
        assert source_calls[k].messages == call.messages


async def test_a_fork_that_contradicts_the_copied_records_is_refused_with_nothing_written(
    stores: Stores,
) -> None:
    """A fork may change the model, not what the prefix's intents are bound to: ``read`` made
    ``never`` contradicts step 1's recorded ``safe`` intent."""
    from polyloop.tools import Tool, ToolRegistry
    from polyloop.types import ReplayPolicy

    effects = Effects()
    await _crashed_and_resumed_source(stores, effects)
    base = scenario_tools(effects)
    changed = []
    for name in base.names():
        spec = base.spec_for(name)
        assert spec is not None
        if name == "read":
            spec = dataclasses.replace(spec, replay_policy=ReplayPolicy.NEVER)
        changed.append(Tool(spec, lambda args: "x"))
    tools = ToolRegistry(changed)
    request = dataclasses.replace(
        _request("contradicts", effects), tools=tools, action_executor=tools.executor()
    )
    with pytest.raises(ConfigurationError, match="is not the policy of tool 'read'"):
        await fork(
            _definition(_new_agent(3), stores.open(), name="b"),
            request,
            source_run_id=SOURCE,
            at_step=3,
        )
    assert RunLog() == await stores.open().read_log("contradicts")


async def test_gated_steps_of_the_prefix_keep_their_decisions_and_a_later_one_asks_again(
    stores: Stores,
) -> None:
    """The gated scenario (approve, answer, reject, edit, submit) forked at step 3: the prefix's
    asks and answers are copied and carried out by nobody again; step 3's refund asks again,
    the fork parks, and once approved it pays once."""
    from polyloop.asking import RunParked, Verdict
    from polyloop.session import approve, resume_or_park
    from tests.asking_kit import GATED_SCENARIO, AboveLimit, drive_gated, gated_request

    effects = Effects()
    store = stores.open()
    source = await drive_gated(store, "gated", effects, started=False)
    assert StopReason.TASK_COMPLETED == source.stop_reason
    executed = dict(effects.counts)
    assert {"refund:80": 1, "refund:40": 1, "submit": 1} == executed
    source_log = await stores.open().read_log("gated")
    request = gated_request("gated-fork", effects, max_steps=20)
    definition = _definition(
        [RuntimeError("no model call before step 3")] * 3 + replies(*GATED_SCENARIO)[3:],
        stores.open(),
        name="b",
    )
    parked = await fork(
        definition, request, source_run_id="gated", at_step=3, approval_policy=AboveLimit()
    )
    assert isinstance(parked, RunParked)
    assert 3 == parked.ask.step
    assert executed == dict(effects.counts)
    log = await stores.open().read_log("gated-fork")
    validate_log(log, "gated-fork")
    assert _prefix(source_log, 3, "gated-fork") == _prefix(log, 3, "gated-fork")
    assert [0, 1, 2, 3] == [a.step for a in log.asks]  # the prefix's three, and step 3's anew
    assert [Verdict.APPROVE, Verdict.ANSWER, Verdict.REJECT] == [a.verdict for a in log.answers]
    await approve(
        stores.open(),
        "gated-fork",
        step=parked.ask.step,
        arguments_sha256=parked.ask.arguments_sha256,
    )  # type: ignore[arg-type]
    again = await resume_or_park(
        _definition(replies(*GATED_SCENARIO), stores.open(), name="b"),
        request,
        approval_policy=AboveLimit(),
    )
    assert isinstance(again, RunResult)
    assert StopReason.TASK_COMPLETED == again.stop_reason
    assert executed["refund:80"] == effects.counts["refund:80"]  # the prefix's, not again
    assert 1 == effects.counts["refund:90"]  # the fork's own, approved as asked
    assert 2 == effects.counts["submit"]


def fork_agent(store: object, effects: Effects) -> tuple[AgentDefinition, RunRequest]:
    """The agent of run ``fork`` (forked at step 2): it reads, then answers."""
    script = [*_new_agent(2, "CALL read {}")[:3], *replies(*["x"] * 3, "FINAL: read")[3:]]
    return _definition(script, store, name="b"), _request("fork", effects)


async def _source_with_ledger(kind: str, where: str, ledger: str) -> None:
    from tests.asking_kit import LedgerEffects

    store = open_store(kind, where)
    try:
        effects = LedgerEffects(ledger)
        tools = scenario_tools(effects)
        request = make_request(SOURCE, tools=tools, executor=MixedExecutor(tools, effects))
        await run(_definition(replies(*SCENARIO), store, name="a"), request)
    finally:
        await close_store(store)


async def _resume_killed_fork(kind: str, where: str, ledger: str) -> None:
    from tests.asking_kit import LedgerEffects

    store = open_store(kind, where)
    try:
        log = await store.read_log("fork")
        assert log.started is not None
        assert 2 == len(log.steps)  # whole: the copy, then step 2 begun
        definition, forked = fork_agent(store, LedgerEffects(ledger))
        result = await resume(definition, forked)
        assert StopReason.AGENT_FINISHED == result.stop_reason
        log = await store.read_log("fork")
        validate_log(log, "fork")
        assert IntentKind.ACTION == log.steps[2].replayed_on_resume
    finally:
        await close_store(store)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jsonl", "sqlite"])
def test_a_fork_killed_mid_action_resumes_by_the_ordinary_rules(
    kind: str, tmp_path: object
) -> None:
    """SIGKILL a process inside the fork's first own action (``read``, safe): the fork is
    whole, resume executes that action again (its policy allows it) and nothing of the
    source's prefix, by the fsynced ledger."""
    import os
    import signal
    import subprocess
    import sys

    from tests.asking_kit import LedgerEffects
    from tests.stores._procs import ROOT

    where, ledger = str(tmp_path), os.path.join(str(tmp_path), "ledger")
    asyncio.run(_source_with_ledger(kind, where, ledger))
    lines = LedgerEffects(ledger)
    assert ["write", "read", "code", "submit"] == lines.ledger()
    child = subprocess.Popen(
        [sys.executable, "-m", "tests.core.session._fork_child", kind, where, ledger],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
    finally:
        os.kill(child.pid, signal.SIGKILL)
        _, err = child.communicate()
    assert "in-action\n" == line, err
    assert ["write", "read", "code", "submit", "read"] == lines.ledger()
    asyncio.run(_resume_killed_fork(kind, where, ledger))
    assert ["write", "read", "code", "submit", "read", "read"] == lines.ledger()


class FreshSessionExecutor(MixedExecutor):
    """The mixed executor declaring :class:`PrefixReplaying` (design 0072): its tool-less
    actions count as code run in its own session, which is fresh until one runs; ``fail_at``
    makes the replay of that many actions report ``env_error``."""

    def __init__(self, tools: ToolRegistry, effects: Effects, fail_at: int | None = None) -> None:
        super().__init__(tools, effects)
        self.replayed: list[str] = []
        self.ran = 0
        self._fail_at = fail_at

    def can_replay_prefix(self) -> bool:
        return self.ran == 0 and not self.replayed

    async def replay_action(self, action: Action) -> ActionOutcome:
        assert action.tool_call is None, "a tool call was replayed"
        self.replayed.append(action.text)
        if len(self.replayed) == self._fail_at:
            return ActionOutcome(ActionStatus.ENV_ERROR, "gone", True, False, 0)
        return await self.execute(action)

    async def execute(self, action: Action) -> ActionOutcome:
        self.ran += action.tool_call is None
        return await super().execute(action)


async def test_a_fresh_session_gets_the_prefix_s_code_replayed_and_no_tool_call(
    stores: Stores,
) -> None:
    effects = Effects()
    await _crashed_and_resumed_source(stores, effects)
    executed = dict(effects.counts)
    tools = scenario_tools(effects)
    for k in range(6):
        executor = FreshSessionExecutor(tools, effects)
        request = dataclasses.replace(_request(f"replayed-{k}", effects), action_executor=executor)
        definition = _definition(_new_agent(k), stores.open(), name="b")
        result = await fork(definition, request, source_run_id=SOURCE, at_step=k)
        assert isinstance(result, RunResult)
        # step 2's code (tool-less, executed) is the only action replayed; the never tools
        # write and submit and the safe read are never repeated
        assert (["print(6 * 7)"] if k > 2 else []) == executor.replayed
        assert {**executed, "code": executed["code"] + len(executor.replayed)} == dict(
            effects.counts
        )
        effects.counts["code"] -= len(executor.replayed)
        log = await stores.open().read_log(f"replayed-{k}")
        assert log.started is not None
        assert log.started.fork_replayed_prefix
    # a session in which code ran is not replayed into unless asked, and then refused
    used = FreshSessionExecutor(tools, effects)
    await used.execute(Action("print(1)", None))
    request = dataclasses.replace(_request("used", effects), action_executor=used)
    with pytest.raises(ConfigurationError, match="already ran"):
        await fork(
            _definition(_new_agent(3), stores.open(), name="b"),
            request,
            source_run_id=SOURCE,
            at_step=3,
            replay_prefix=True,
        )
    assert RunLog() == await stores.open().read_log("used")
    # an executor that declares nothing cannot be asked to replay
    with pytest.raises(ConfigurationError, match="does not declare"):
        await fork(
            _definition(_new_agent(3), stores.open(), name="b"),
            _request("plain", effects),
            source_run_id=SOURCE,
            at_step=3,
            replay_prefix=True,
        )
    assert RunLog() == await stores.open().read_log("plain")


async def test_a_replay_that_fails_writes_no_fork(stores: Stores) -> None:
    effects = Effects()
    await _crashed_and_resumed_source(stores, effects)
    executor = FreshSessionExecutor(scenario_tools(effects), effects, fail_at=1)
    request = dataclasses.replace(_request("failed", effects), action_executor=executor)
    with pytest.raises(PolyLoopError, match="nothing was written"):
        await fork(
            _definition(_new_agent(4), stores.open(), name="b"),
            request,
            source_run_id=SOURCE,
            at_step=4,
        )
    assert RunLog() == await stores.open().read_log("failed")
    # without replay the same fork goes on against the session as it is
    plain = dataclasses.replace(
        request, action_executor=FreshSessionExecutor(scenario_tools(effects), effects)
    )
    result = await fork(
        _definition(_new_agent(4), stores.open(), name="b"),
        plain,
        source_run_id=SOURCE,
        at_step=4,
        replay_prefix=False,
    )
    assert isinstance(result, RunResult)
    log = await stores.open().read_log("failed")
    assert log.started is not None
    assert not log.started.fork_replayed_prefix
