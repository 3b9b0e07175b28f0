"""The crashing driver for the real-receiver test: ``python -m tests.adapters.otel._child
PHOENIX_URL DATABASE RUN_ID POLICY LEDGER``.

Runs the ledger agent's kill script (``pay``, then ``hang_<POLICY>``, then a final answer) on a
SQLite store with the OpenTelemetry sink exporting to Phoenix every 50 ms. The step-1 tool
prints ``in-action`` and hangs until the parent kills this process with SIGKILL.
"""

from __future__ import annotations

import asyncio
import sys

from polyloop.adapters.otel import OtlpTelemetry
from polyloop.session import AgentDefinition, run
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import LineDecisionParser, ScriptedModelClient, reply
from tests.stores import _agent


def definition(store: SqliteRunStore, policy: str, telemetry: OtlpTelemetry) -> AgentDefinition:
    script = _agent.hold_script(policy)
    return AgentDefinition(
        model_client=ScriptedModelClient(
            [reply(text, call_id=f"c{k}") for k, text in enumerate(script)], by_call_index=True
        ),
        decision_parser=LineDecisionParser(),
        store=store,
        event_sink=telemetry.event_sink(),
        synthetic_observations=_agent.SYNTHETIC,
    )


def telemetry_for(url: str) -> OtlpTelemetry:
    return OtlpTelemetry(
        url, service_name="polyloop-otel-test", export_interval_seconds=0.05, metrics=False
    )


async def main(url: str, database: str, run_id: str, policy: str, ledger: str) -> None:
    telemetry = telemetry_for(url)
    store = SqliteRunStore(database)
    tools = _agent.ledger_tools(ledger, run_id, "crashed", hang=True)
    await run(definition(store, policy, telemetry), _agent.ledger_request(run_id, tools))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
