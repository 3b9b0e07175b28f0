"""A decision answers exactly the ask it names (issue 36 item 1, design 0059), on all four
stores: a decision made for one ask and sent again (a retried form, a double click, a replayed
request) is refused when the run waits on another ask, however alike the two asks are."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.asking import RunParked, UserAsked
from polyloop.errors import AskNotPendingError, RunLeaseHeldError, StaleAskError
from polyloop.ports import RunStore
from polyloop.recovery import pending_ask, validate_log
from polyloop.session import (
    DEFAULT_REJECTED_TEMPLATE,
    UserDecision,
    answer,
    approve,
    edit,
    read_pending_ask,
    reject,
    resume_or_park,
    run_or_park,
)
from polyloop.tools import ToolRegistry
from polyloop.types import ActionStatus, RunResult, StopReason
from tests.asking_kit import definition, gated_request
from tests.loop_kit import Effects
from tests.stores import _postgres
from tests.stores._helpers import STORE_KINDS, close_store, open_store

# Fixed before any test starts a child process, so that children name their schemas alike.
_postgres.claim_session_prefix()

REFUND = 'CALL refund {"amount": 80}'
QUESTION = 'CALL ask_user {"question": "Which account?"}'
SUBMIT = "CALL submit {}"


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    yield
    _postgres.drop_used_schemas()


@pytest.fixture(params=STORE_KINDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RunStore]:
    opened = open_store(request.param, str(tmp_path))
    try:
        yield opened
    finally:
        await close_store(opened)


class Ledger(Effects):
    """Effects in the order they happened: what really ran, one entry per execution."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[str] = []

    def hit(self, name: str) -> str:
        self.entries.append(name)
        return super().hit(name)


async def _drive(
    store: RunStore, script: list[str], effects: Effects, *, started: bool = True
) -> RunResult | RunParked:
    request = gated_request("r", effects)
    entry = resume_or_park if started else run_or_park
    return await entry(definition(script, store), request)


async def test_an_approval_sent_again_does_not_approve_the_next_alike_ask(
    store: RunStore,
) -> None:
    """The issue's reproduction: two refunds with identical arguments; the approval of step 0
    sent again (same arguments_sha256) once the run waits at step 1 is refused with
    StaleAskError naming both asks, nothing is written, and refund #2 does not run."""
    effects = Ledger()
    script = [REFUND, REFUND, SUBMIT]
    parked = await _drive(store, script, effects, started=False)
    assert isinstance(parked, RunParked)
    ask0 = await read_pending_ask(store, "r")
    assert ask0 is not None
    assert 0 == ask0.step
    await approve(
        store, "r", step=ask0.step, arguments_sha256=ask0.arguments_sha256, decided_by="alice"
    )
    second = await _drive(store, script, effects)
    assert isinstance(second, RunParked)
    assert (1, ask0.arguments_sha256) == (second.ask.step, second.ask.arguments_sha256)
    assert ["refund:80"] == effects.entries
    before = await store.read_log("r")
    with pytest.raises(StaleAskError) as caught:
        await approve(
            store, "r", step=ask0.step, arguments_sha256=ask0.arguments_sha256, decided_by="alice"
        )
    message = str(caught.value)
    assert "step" == caught.value.key
    assert "names the ask of step 0 (approval of refund), already decided (approve by 'alice'" in (
        message
    )
    assert "waits on the ask of step 1 (approval of refund, asked at " in message
    assert "decide it naming step 1" in message
    assert before == await store.read_log("r")
    third = await _drive(store, script, effects)
    assert isinstance(third, RunParked)
    assert 1 == third.ask.step
    assert ["refund:80"] == effects.entries


async def _decide_with(
    verb: str, store: RunStore, ask: UserAsked, step: int, tools: ToolRegistry
) -> object:
    if verb == "approve":
        return await approve(store, "r", step=step, arguments_sha256=ask.arguments_sha256)
    if verb == "edit":
        return await edit(
            store, "r", {"amount": 7}, tools=tools, step=step, arguments_sha256=ask.arguments_sha256
        )
    if verb == "reject":
        return await reject(
            store, "r", reason="not now", step=step, arguments_sha256=ask.arguments_sha256
        )
    return await answer(store, "r", "savings", step=step)


@pytest.mark.parametrize("verb", ["approve", "edit", "reject", "answer"])
async def test_each_verb_refuses_a_decision_for_another_ask(verb: str, store: RunStore) -> None:
    """For each verb: a decision naming a step the run never asked at is refused, the decision
    of step 0 is taken, and sent again once the run waits at step 1 on an identical ask it is
    refused (StaleAskError, both asks named); once step 1 is decided too, a third send names a
    decided ask of a run that waits on none: AskNotPendingError. Nothing refused is written,
    and no action runs without its own decision."""
    effects = Ledger()
    line = QUESTION if verb == "answer" else REFUND
    script = [line, line, SUBMIT]
    tools = gated_request("r", effects).tools
    parked = await _drive(store, script, effects, started=False)
    assert isinstance(parked, RunParked)
    before = await store.read_log("r")
    with pytest.raises(StaleAskError, match="the ask of step 5, which this run never made"):
        await _decide_with(verb, store, parked.ask, 5, tools)
    assert before == await store.read_log("r")
    await _decide_with(verb, store, parked.ask, 0, tools)
    second = await _drive(store, script, effects)
    assert isinstance(second, RunParked)
    assert (1, parked.ask.arguments_sha256) == (second.ask.step, second.ask.arguments_sha256)
    before = await store.read_log("r")
    with pytest.raises(StaleAskError) as caught:
        await _decide_with(verb, store, parked.ask, 0, tools)
    assert "step" == caught.value.key
    assert "the ask of step 0" in str(caught.value)
    assert "waits on the ask of step 1" in str(caught.value)
    assert before == await store.read_log("r")
    executed = {"approve": ["refund:80"], "edit": ["refund:7"]}.get(verb, [])
    assert executed == effects.entries
    await _decide_with(verb, store, second.ask, 1, tools)
    with pytest.raises(AskNotPendingError, match="the ask of step 1 is already decided"):
        await _decide_with(verb, store, second.ask, 1, tools)
    done = await _drive(store, script, effects)
    assert isinstance(done, RunResult)
    assert [*executed, *executed, "submit"] == effects.entries
    with pytest.raises(AskNotPendingError, match="finished"):
        await _decide_with(verb, store, parked.ask, 0, tools)


async def test_an_in_process_decision_naming_another_ask_is_refused(store: RunStore) -> None:
    """``ask_now``: a decision without a step answers the ask the handler was called with; one
    relayed with the step of an earlier ask (a queue holding a stale click) is refused, and the
    run stays parked on its own ask."""
    effects = Ledger()
    script = [REFUND, REFUND, SUBMIT]
    relayed: list[UserDecision] = [UserDecision.approve(step=0), UserDecision.approve(step=0)]

    async def ask_now(ask: UserAsked) -> UserDecision | None:
        return relayed.pop(0) if relayed else None

    request = gated_request("r", effects)
    with pytest.raises(StaleAskError, match="waits on the ask of step 1") as caught:
        await run_or_park(definition(script, store), request, ask_now=ask_now)
    assert "step" == caught.value.key
    assert ["refund:80"] == effects.entries
    log = await store.read_log("r")
    waiting = pending_ask(log)
    assert waiting is not None
    assert 1 == waiting.step
    assert [0] == [answered.step for answered in log.answers]

    async def by_the_call(ask: UserAsked) -> UserDecision | None:
        return UserDecision.approve(decided_by="terminal")

    done = await resume_or_park(definition(script, store), request, ask_now=by_the_call)
    assert isinstance(done, RunResult)
    assert ["refund:80", "refund:80", "submit"] == effects.entries


# ---------------------------------------------------------------------------
# The property: old decisions re-sent at random moments never decide another ask
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    """A decision as a client would send it again: the verb, the ask it names, its digest."""

    verdict: str  # approve | edit | reject | answer
    step: int
    digest: str


async def _send(store: RunStore, run_id: str, sent: Sent, tools: ToolRegistry) -> None:
    if sent.verdict == "approve":
        await approve(store, run_id, step=sent.step, arguments_sha256=sent.digest)
    elif sent.verdict == "edit":
        await edit(
            store,
            run_id,
            {"amount": 1000 + sent.step},
            tools=tools,
            step=sent.step,
            arguments_sha256=sent.digest,
        )
    elif sent.verdict == "reject":
        await reject(
            store, run_id, reason=f"no {sent.step}", step=sent.step, arguments_sha256=sent.digest
        )
    else:
        await answer(store, run_id, f"answer {sent.step}", step=sent.step)


async def _refused(store: RunStore, run_id: str, sent: Sent, tools: ToolRegistry) -> None:
    """``sent`` again: refused, naming why, and nothing written."""
    before = await store.read_log(run_id)
    waiting = pending_ask(before)
    with pytest.raises((StaleAskError, AskNotPendingError)) as caught:
        await _send(store, run_id, sent, tools)
    if waiting is not None:
        assert isinstance(caught.value, StaleAskError)
        assert f"waits on the ask of step {waiting.step}" in str(caught.value)
        assert f"the ask of step {sent.step}" in str(caught.value)
    assert before == await store.read_log(run_id)


async def _raced(store: RunStore, run_id: str, sent: Sent, tools: ToolRegistry) -> None:
    """``sent`` again while a resume drives the run: refused, whichever takes the lease."""
    with contextlib.suppress(RunLeaseHeldError), pytest.raises((StaleAskError, AskNotPendingError)):
        await _send(store, run_id, sent, tools)


#: What the model calls at each step (all refunds alike, all questions alike) and the verdict
#: the person gives that step's ask.
GATED = st.one_of(
    st.tuples(st.just(REFUND), st.sampled_from(["approve", "edit", "reject"])),
    st.just((QUESTION, "answer")),
)


def _expected(steps: list[tuple[str, str]]) -> list[str]:
    """What must have run, in order: each refund its own verdict allows, then the submit."""
    ran = []
    for k, (_, verdict) in enumerate(steps):
        if verdict == "approve":
            ran.append("refund:80")
        elif verdict == "edit":
            ran.append(f"refund:{1000 + k}")
    return [*ran, "submit"]


async def _scenario(
    store: RunStore, run_id: str, steps: list[tuple[str, str]], data: st.DataObject
) -> None:
    effects = Ledger()
    script = [line for line, _ in steps] + [SUBMIT]
    request = gated_request(run_id, effects, max_steps=len(script) + 1)
    tools = request.tools
    sent: list[Sent] = []
    outcome = await run_or_park(definition(script, store), request)
    while isinstance(outcome, RunParked):
        ask = outcome.ask
        for old in data.draw(st.lists(st.sampled_from(sent), max_size=2)) if sent else []:
            await _refused(store, run_id, old, tools)
        mine = Sent(steps[ask.step][1], ask.step, ask.arguments_sha256)
        await _send(store, run_id, mine, tools)
        sent.append(mine)
        if data.draw(st.booleans(), label="double click"):
            await _refused(store, run_id, mine, tools)
        raced = data.draw(st.none() | st.sampled_from(sent), label="re-sent during the resume")
        resume = resume_or_park(definition(script, store), request, lease_wait_seconds=30)
        if raced is not None:
            outcome, _ = await asyncio.gather(resume, _raced(store, run_id, raced, tools))
        else:
            outcome = await resume
    assert StopReason.TASK_COMPLETED is outcome.stop_reason
    assert _expected(steps) == effects.entries
    for old in data.draw(st.lists(st.sampled_from(sent), max_size=2)):
        await _refused(store, run_id, old, tools)
    log = await store.read_log(run_id)
    validate_log(log, run_id)
    assert [(k, verdict) for k, (_, verdict) in enumerate(steps)] == [
        (a.step, a.verdict.value) for a in log.answers
    ]
    for k, (_, verdict) in enumerate(steps):
        record = outcome.steps[k]
        if verdict == "answer":
            assert f"answer {k}" == record.observation
        elif verdict == "reject":
            assert ActionStatus.NOT_EXECUTED is record.action_status
            assert DEFAULT_REJECTED_TEMPLATE.replace("{reason}", f"no {k}") == record.observation


def _check(kind: str, steps: list[tuple[str, str]], data: st.DataObject) -> None:
    async def scenario(where: str) -> None:
        store = open_store(kind, where)
        try:
            await _scenario(store, "p", steps, data)
        finally:
            await close_store(store)

    with tempfile.TemporaryDirectory() as where:
        asyncio.run(scenario(where))


STEPS = st.lists(GATED, min_size=1, max_size=6)


@pytest.mark.parametrize("kind", ["memory", "jsonl", "sqlite"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, data=st.data())
def test_a_gated_action_never_runs_on_a_decision_made_for_another_ask(
    kind: str, steps: list[tuple[str, str]], data: st.DataObject
) -> None:
    """Random runs of identical refunds and identical questions, each decided once by its own
    ask; old decisions (with their original steps and digests) are re-sent at random moments:
    before the next decision, as a double click, while a resume drives the run, after the
    end. Every re-send is refused and writes nothing; what ran is exactly what each ask's own
    decision allows, in order; each answer and rejection reaches its own step."""
    _check(kind, steps, data)


@pytest.mark.parametrize("kind", ["postgres"])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS, data=st.data())
def test_a_gated_action_never_runs_on_a_decision_made_for_another_ask_on_postgres(
    kind: str, steps: list[tuple[str, str]], data: st.DataObject
) -> None:
    """The same property on the PostgreSQL store, with fewer examples (each opens a schema)."""
    _check(kind, steps, data)
