"""One AgentDefinition serves many concurrent runs over one store without cross-talk."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from polyloop.ports import Action, ModelCall
from polyloop.recovery import validate_log
from polyloop.session import AgentDefinition, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import LineDecisionParser, NullEventSink
from polyloop.types import ActionOutcome, ActionStatus, ModelReply, StopReason
from tests.loop_kit import SYNTHETIC, make_request


class EchoModel:
    """Replies with the run's own id, yielding to the event loop on every call."""

    async def call(self, call: ModelCall) -> ModelReply:
        await asyncio.sleep(0)
        if call.call_index >= 3:
            return ModelReply(None, f"FINAL: {call.run_id}", "")
        return ModelReply(
            f"{call.run_id}/{call.call_index}", f"RUN: {call.run_id}:{call.call_index}", ""
        )

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "echo"}


class EchoExecutor:
    async def execute(self, action: Action) -> ActionOutcome:
        await asyncio.sleep(0)
        return ActionOutcome(ActionStatus.EXECUTED, f"done {action.text}", False, False, 0)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "echo"}


async def test_two_hundred_concurrent_runs_share_one_definition() -> None:
    """200 runs interleave on one definition and store; each log holds only its own records."""
    store = MemoryRunStore()
    definition = AgentDefinition(
        EchoModel(), LineDecisionParser(), store, NullEventSink(), SYNTHETIC
    )
    run_ids = [f"run-{i:03d}" for i in range(200)]
    results = await asyncio.gather(
        *(run(definition, make_request(r, executor=EchoExecutor())) for r in run_ids)
    )
    for run_id, result in zip(run_ids, results, strict=True):
        assert (StopReason.AGENT_FINISHED, run_id) == (result.stop_reason, result.final_answer)
        log = await store.read_log(run_id)
        validate_log(log, run_id)
        assert [f"{run_id}:{k}" for k in range(3)] == [c.step.action for c in log.steps[:3]]
        assert [f"{run_id}/{k}" for k in range(3)] == [c.step.call_id for c in log.steps[:3]]
        assert {run_id} == {i.run_id for i in log.intents} | {r.run_id for r in log.model_results}
