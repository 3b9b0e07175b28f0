"""Every refusal of gating and deciding (issue 24): each says what is wrong, and none writes."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from polyloop.asking import RunParked, UserAsked
from polyloop.errors import (
    AskNotPendingError,
    ConfigurationError,
    RunLeaseHeldError,
    SnapshotMismatchError,
    StaleAskError,
    UnsupportedStoreError,
)
from polyloop.ports import Event, EventKind, ModelReply, ParsedReply
from polyloop.session import (
    UserDecision,
    answer,
    approve,
    edit,
    reject,
    resume_or_park,
    run_or_park,
)
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, RecordingEventSink
from polyloop.tools import ToolSpec
from polyloop.types import RunResult
from tests.asking_kit import AboveLimit, definition, gated_request, gated_tools
from tests.loop_kit import Effects, RecordingStore, make_definition, replies

SCRIPT = ['CALL refund {"amount": 80}', 'CALL ask_user {"question": "Why?"}', "CALL submit {}"]


async def _parked(
    store: MemoryRunStore | None = None, **options: object
) -> tuple[MemoryRunStore, RunParked]:
    store = store or MemoryRunStore()
    parked = await run_or_park(definition(SCRIPT, store), gated_request("r", Effects()), **options)  # type: ignore[arg-type]
    assert isinstance(parked, RunParked)
    return store, parked


async def _unchanged(store: MemoryRunStore, before: object) -> None:
    assert before == await store.read_log("r")


@pytest.mark.parametrize(
    ("key", "options"),
    [
        ("arguments_sha256", {"arguments_sha256": "0" * 64}),
        ("schema_sha256", {"schema_sha256": "1" * 64}),
        ("policy_name", {"policy_name": "another-policy"}),
    ],
)
async def test_a_decision_bound_to_other_digests_is_refused_by_key(
    key: str, options: Mapping[str, str]
) -> None:
    """Stale arguments, schema or policy: StaleAskError names the key; nothing is written."""
    store, parked = await _parked()
    before = await store.read_log("r")
    arguments = {"step": 0, "arguments_sha256": parked.ask.arguments_sha256, **options}
    with pytest.raises(StaleAskError, match=key) as caught:
        await approve(store, "r", **arguments)  # type: ignore[arg-type]
    assert key == caught.value.key
    await _unchanged(store, before)


@pytest.mark.parametrize(
    ("key", "changed"),
    [
        ("schema_sha256", {"refund_gated": True}),
        ("description_sha256", {"refund_description": "Refund money, now in bulk."}),
    ],
)
async def test_a_decision_under_changed_tools_is_refused_by_key(
    key: str, changed: Mapping[str, object]
) -> None:
    """The decider's current registry differs from the one asked about: refused by key."""
    store, parked = await _parked()
    effects = Effects()
    tools = gated_tools(effects, **changed)  # type: ignore[arg-type]
    if key == "schema_sha256":
        spec = tools.spec_for("refund")
        assert spec is not None
        from polyloop.tools import Tool, ToolRegistry

        tools = ToolRegistry(
            [
                Tool(
                    ToolSpec(
                        "refund", spec.description, {"type": "object"}, requires_approval=True
                    ),
                    lambda args: "x",
                )
            ]
        )
    with pytest.raises(StaleAskError) as caught:
        await approve(
            store,
            "r",
            step=parked.ask.step,
            arguments_sha256=parked.ask.arguments_sha256,
            tools=tools,
        )
    assert key == caught.value.key
    with pytest.raises(StaleAskError) as again:
        await edit(
            store,
            "r",
            {"amount": 1},
            tools=tools,
            step=parked.ask.step,
            arguments_sha256=parked.ask.arguments_sha256,
        )
    assert key == again.value.key


async def test_resume_under_a_changed_schema_or_policy_is_refused_by_key() -> None:
    """The snapshot holds the tools' digests and the policy's name: a resume under others is
    refused listing the key, before any decision is carried out."""
    store = MemoryRunStore()
    effects = Effects()
    tools = gated_tools(effects, refund_gated=False)
    request = gated_request("r", effects, tools=tools)
    parked = await run_or_park(definition(SCRIPT, store), request, approval_policy=AboveLimit())
    assert isinstance(parked, RunParked)
    await approve(store, "r", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256)
    with pytest.raises(SnapshotMismatchError, match=r"approval\.policy"):
        await resume_or_park(definition(SCRIPT, store), request, approval_policy=AboveLimit(10))
    other = gated_request("r", effects, tools=gated_tools(effects, refund_description="New."))
    with pytest.raises(SnapshotMismatchError, match=r"request\.tools\.refund\.description_sha256"):
        await resume_or_park(definition(SCRIPT, store), other, approval_policy=AboveLimit())
    assert 0 == effects.counts["refund:80"]


async def test_nothing_pending_says_why() -> None:
    """No log, already decided (by whom), finished: AskNotPendingError says which."""
    store = MemoryRunStore()
    with pytest.raises(AskNotPendingError, match="no log"):
        await approve(store, "r", step=0, arguments_sha256="0" * 64)
    store, parked = await _parked(store)
    await reject(
        store,
        "r",
        reason="no",
        step=parked.ask.step,
        arguments_sha256=parked.ask.arguments_sha256,
        decided_by="bo",
    )
    with pytest.raises(AskNotPendingError, match=r"already decided \(reject by 'bo'"):
        await approve(
            store, "r", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256
        )


async def test_deciding_while_a_driver_holds_the_run_is_refused() -> None:
    """The decision is written under the run's lease: a held lease refuses it."""
    store, parked = await _parked()
    lease = await store.acquire_run_lease("r")
    try:
        with pytest.raises(RunLeaseHeldError):
            await approve(
                store, "r", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256
            )
    finally:
        await lease.release()
    assert () == (await store.read_log("r")).answers


async def test_a_verdict_of_the_wrong_kind_or_a_bad_edit_is_refused() -> None:
    """An answer to an approval, an edit the schema refuses, an empty reason: refused."""
    store, parked = await _parked()
    before = await store.read_log("r")
    digest = parked.ask.arguments_sha256
    tools = gated_request("r", Effects()).tools
    with pytest.raises(ConfigurationError, match="waits for an approval"):
        await answer(store, "r", "yes", step=0)
    with pytest.raises(ConfigurationError, match="refused like any call"):
        await edit(store, "r", {"amount": -5}, tools=tools, step=0, arguments_sha256=digest)
    with pytest.raises(ConfigurationError, match="needs a reason"):
        await reject(store, "r", reason="  ", step=0, arguments_sha256=digest)
    await _unchanged(store, before)


async def test_a_question_cannot_be_approved() -> None:
    """A question is answered, never approved."""
    store, parked = await _parked()
    await approve(store, "r", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256)
    second = await resume_or_park(definition(SCRIPT, store), gated_request("r", Effects()))
    assert isinstance(second, RunParked)
    with pytest.raises(ConfigurationError, match="asks the user a question"):
        await approve(
            store, "r", step=second.ask.step, arguments_sha256=second.ask.arguments_sha256
        )


async def test_a_tool_less_action_cannot_be_edited() -> None:
    """Only a call has arguments to edit."""
    store = MemoryRunStore()
    tools = gated_tools(Effects(), refund_gated=False)
    request = gated_request("r", Effects(), tools=tools)
    parked = await run_or_park(
        definition(["RUN: print(2)"], store), request, approval_policy=AboveLimit()
    )
    assert isinstance(parked, RunParked)
    with pytest.raises(ConfigurationError, match="tool-less"):
        await edit(
            store,
            "r",
            {"a": 1},
            tools=tools,
            step=parked.ask.step,
            arguments_sha256=parked.ask.arguments_sha256,
        )


async def test_a_store_without_user_asking_refuses_gated_runs_only() -> None:
    """A store lacking the capability: a gated run and a decision are refused before any
    write, naming the capability; an ungated run on it works."""
    store = RecordingStore(MemoryRunStore())
    with pytest.raises(UnsupportedStoreError, match="UserAsking"):
        await run_or_park(definition(SCRIPT, store), gated_request("r", Effects()))
    with pytest.raises(UnsupportedStoreError, match="UserAsking"):
        await approve(store, "r", step=0, arguments_sha256="0" * 64)  # type: ignore[arg-type]
    assert [] == store.writes
    from tests.loop_kit import make_request

    result = await run_or_park(make_definition(replies("FINAL: done"), store), make_request("u"))
    assert isinstance(result, RunResult)


async def test_ask_now_must_return_a_decision_or_none() -> None:
    """A handler returning something else is refused, and the run stays parked."""
    store = MemoryRunStore()

    async def wrong(ask: UserAsked) -> object:
        return True

    with pytest.raises(ConfigurationError, match="UserDecision"):
        await run_or_park(definition(SCRIPT, store), gated_request("r", Effects()), ask_now=wrong)  # type: ignore[arg-type]
    log = await store.read_log("r")
    assert 1 == len(log.asks)
    assert () == log.answers


async def test_an_invalid_in_process_edit_leaves_the_run_parked() -> None:
    """ask_now's edit is checked like any decision; refused, nothing more is written."""
    store = MemoryRunStore()

    async def bad_edit(ask: UserAsked) -> UserDecision:
        return UserDecision.edit({"amount": "lots"})

    with pytest.raises(ConfigurationError, match="refused like any call"):
        await run_or_park(
            definition(SCRIPT, store), gated_request("r", Effects()), ask_now=bad_edit
        )
    parked = await resume_or_park(definition(SCRIPT, store), gated_request("r", Effects()))
    assert isinstance(parked, RunParked)


def test_gating_options_are_checked() -> None:
    """asks_user excludes approval and completion; flags are bools."""
    with pytest.raises(ConfigurationError, match="asks_user"):
        ToolSpec("q", "d", {"type": "object"}, asks_user=True, requires_approval=True)
    with pytest.raises(ConfigurationError, match="requires_approval must be a bool"):
        ToolSpec("q", "d", {"type": "object"}, requires_approval="yes")  # type: ignore[arg-type]


async def test_a_rejected_template_without_its_token_or_a_nameless_policy_is_refused() -> None:
    """Both are refused before anything is written."""
    store = MemoryRunStore()
    with pytest.raises(ConfigurationError, match="reason"):
        await run_or_park(
            definition(SCRIPT, store), gated_request("r", Effects()), rejected_template="No."
        )

    def nameless(action: object) -> bool:
        return True

    with pytest.raises(ConfigurationError, match="name"):
        await run_or_park(
            definition(SCRIPT, store), gated_request("r", Effects()), approval_policy=nameless
        )  # type: ignore[arg-type]
    assert () == tuple(await store.list_run_ids())


class _Drifting(LineDecisionParser):
    """A parser that is not deterministic: the second parse of a reply gives other arguments."""

    def __init__(self) -> None:
        self.seen = 0

    def parse(self, reply: ModelReply) -> ParsedReply:
        self.seen += 1
        if self.seen > 1:
            reply = ModelReply(reply.call_id, reply.content.replace("80", "81"), reply.thinking)
        return super().parse(reply)


async def test_a_reply_that_parses_into_another_action_on_resume_is_refused() -> None:
    """Resume re-reads the recorded reply; other arguments than asked: StaleAskError."""
    store, parked = await _parked()
    await approve(store, "r", step=parked.ask.step, arguments_sha256=parked.ask.arguments_sha256)
    drifting = make_definition(replies(*SCRIPT), store, parser=_Drifting())
    drifting.decision_parser.seen = 1  # type: ignore[attr-defined]
    with pytest.raises(StaleAskError) as caught:
        await resume_or_park(drifting, gated_request("r", Effects()))
    assert "arguments_sha256" == caught.value.key


async def test_parking_is_announced_by_the_last_event() -> None:
    """RUN_PARKED carries the ask and ends the invocation's events (no RUN_FINISHED)."""
    store = MemoryRunStore()
    sink = RecordingEventSink()
    parked = await run_or_park(
        make_definition(replies(*SCRIPT), store, sink=sink), gated_request("r", Effects())
    )
    assert isinstance(parked, RunParked)
    events: list[Event] = list(sink.events)
    assert EventKind.RUN_PARKED is events[-1].kind
    assert parked.ask == events[-1].ask
    assert EventKind.RUN_FINISHED not in {e.kind for e in events}
