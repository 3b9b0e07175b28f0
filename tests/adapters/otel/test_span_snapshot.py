"""The spans a crashed-and-resumed run produces, as a dashboard sees them: names, parents and
attributes held by a snapshot, so that no name a query or panel relies on changes unnoticed."""

from __future__ import annotations

from syrupy.assertion import SnapshotAssertion

from polyloop.types import ReplayPolicy
from tests.adapters.otel._agent import Telemetry, in_memory
from tests.adapters.otel.test_sink import _crash_then_resume, _three_steps


def _layout(telemetry: Telemetry) -> list[dict[str, object]]:
    spans = sorted(telemetry.finished(), key=lambda s: (s.start_time or 0, s.name or ""))
    names = {s.context.span_id: s.name for s in spans}
    return [
        {
            "name": s.name,
            "parent": None if s.parent is None else names.get(s.parent.span_id, "(the run)"),
            "kind": s.kind.name,
            "status": s.status.status_code.name,
            "description": s.status.description,
            "attributes": dict(sorted((s.attributes or {}).items())),
        }
        for s in spans
    ]


async def test_the_spans_of_a_three_step_run(snapshot: SnapshotAssertion) -> None:
    """A run with a tool action, a failing tool and a final answer."""
    telemetry = in_memory()
    await _three_steps(telemetry)
    assert snapshot == _layout(telemetry)


async def test_the_spans_of_a_run_resumed_after_a_crash(snapshot: SnapshotAssertion) -> None:
    """A crash inside a SAFE action, then resume (replayed), and inside a NEVER one (refused)."""
    replayed, _ = await _crash_then_resume(ReplayPolicy.SAFE)
    refused, _ = await _crash_then_resume(ReplayPolicy.NEVER)
    assert snapshot == {"safe": _layout(replayed), "never": _layout(refused)}
