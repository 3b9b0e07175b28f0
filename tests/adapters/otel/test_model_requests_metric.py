"""``polyloop.model.requests`` (design 0065): the requests of every model call, first attempts
and retries apart, as a retrying client recorded them (a call without counts made one)."""

from __future__ import annotations

from collections.abc import Mapping

from polyloop.ports import ModelCall
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import REQUESTS_USAGE_KEY, RETRIES_USAGE_KEY, ModelReply, StopReason
from tests.adapters.otel._agent import definition, in_memory, request


class CountedReplies:
    """Three calls: one retried twice, one without counts, one that fails after 4 requests."""

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "counted"}

    async def call(self, call: ModelCall) -> ModelReply:
        if call.call_index == 0:
            usage = {"total_tokens": 9, REQUESTS_USAGE_KEY: 3, RETRIES_USAGE_KEY: 2}
            return ModelReply("c0", "CALL lookup {}", "", "stop", usage)
        if call.call_index == 1:
            return ModelReply("c1", "CALL lookup {}", "")
        raise GaveUp()


class GaveUp(Exception):
    def __init__(self) -> None:
        super().__init__("gave up")
        self.usage = {REQUESTS_USAGE_KEY: 4, RETRIES_USAGE_KEY: 3}


async def test_requests_are_counted_with_retries_apart() -> None:
    telemetry = in_memory()
    store = MemoryRunStore()
    result = await run(definition(CountedReplies(), store, telemetry.sink), request("r-requests"))
    assert result.stop_reason is StopReason.LLM_ERROR
    measured = dict(
        (bool(attributes["polyloop.retry"]), value)
        for attributes, value in telemetry.measurements()["polyloop.model.requests"]
    )
    assert measured == {False: 3.0, True: 5.0}
