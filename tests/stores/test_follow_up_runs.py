"""Follow-up runs on every store (design 0052): the link and the input survive a reopen, and a
follow-up runs from a chain read back from the store."""

from __future__ import annotations

from polyloop.session import follow_up, run
from polyloop.types import RunStarted, StopReason
from tests.loop_kit import make_definition, make_request, replies
from tests.stores._helpers import Opened


async def test_a_follow_up_link_survives_a_reopen(opened: Opened) -> None:
    """follows_run_id and queued_input are read back exactly, also by a second store object."""
    store = opened.store
    await run(make_definition(replies("FINAL: one"), store), make_request("turn-1"))
    result = await follow_up(
        make_definition(replies("FINAL: two"), store),
        "turn-1",
        make_request("turn-2"),
        "and then? 🚀\nline two",
    )
    assert StopReason.AGENT_FINISHED == result.stop_reason
    for reader in (store, opened.reopen()):
        started = (await reader.read_log("turn-2")).started
        assert isinstance(started, RunStarted)
        assert ("turn-1", "and then? 🚀\nline two") == (
            started.follows_run_id,
            started.queued_input,
        )
        first = (await reader.read_log("turn-1")).started
        assert first is not None
        assert (None, None) == (first.follows_run_id, first.queued_input)


async def test_a_third_turn_runs_from_a_reopened_store(opened: Opened) -> None:
    """The chain is read from the store, so a fresh store object continues the conversation."""
    store = opened.store
    await run(make_definition(replies("FINAL: one"), store), make_request("c-1"))
    await follow_up(make_definition(replies("FINAL: two"), store), "c-1", make_request("c-2"), "b")
    other = opened.reopen()
    third = make_definition(replies("FINAL: three"), other)
    result = await follow_up(third, "c-2", make_request("c-3"), "c")
    assert StopReason.AGENT_FINISHED == result.stop_reason
    texts = [m.content[0].text for m in third.model_client.calls[0].messages]  # type: ignore[attr-defined]
    assert ["FINAL: one", "b", "FINAL: two", "c"] == texts[-4:]
