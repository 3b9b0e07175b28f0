"""Properties of what the sink derives: trace ids from run ids, error types from recorded
failures, GenAI usage from provider usage."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from polyloop.adapters.otel import run_span_id, run_trace_id
from polyloop.adapters.otel._sink import _USAGE_KEYS, _error_type
from polyloop.ports import Event, EventKind
from polyloop.types import ModelCallResult, ModelReply, StepRecord
from tests.adapters.otel._agent import in_memory

run_ids = st.text(min_size=1, max_size=80)


@given(run_ids)
def test_ids_are_pure_valid_functions_of_the_run_id(run_id: str) -> None:
    """Same run id, same ids; a trace id fits 128 bits and a span id 64, and neither is 0
    (OpenTelemetry's invalid id)."""
    assert run_trace_id(run_id) == run_trace_id(run_id)
    assert 0 < run_trace_id(run_id) < 2**128
    assert 0 < run_span_id(run_id) < 2**64


@given(st.lists(run_ids, min_size=2, max_size=20, unique=True))
def test_distinct_run_ids_get_distinct_traces(ids: list[str]) -> None:
    """Different runs never share a trace (a collision needs a SHA-256 prefix collision)."""
    assert len(ids) == len({run_trace_id(run_id) for run_id in ids})


@given(st.text(max_size=200))
def test_an_error_type_is_a_bare_name_never_the_message(failure: str) -> None:
    """Whatever the recorded failure says, the error type is an identifier-like name taken
    from before its first colon, or the generic one; the message never leaks into it."""
    error = _error_type(failure)
    assert error == "model_call_failed" or error == failure.split(":", 1)[0].strip()
    assert ":" not in error
    assert " " not in error
    assert len(error) <= 100


@given(st.dictionaries(st.text(max_size=40), st.integers(0, 10**9), max_size=8))
def test_only_known_usage_keys_become_attributes(usage: dict[str, int]) -> None:
    """A provider's usage keys the mapping does not know never show up; the known ones map
    to the conventions' names with their counts."""
    telemetry = in_memory()
    sink = telemetry.sink
    reply = ModelReply("id", "", "", usage=usage)
    step = StepRecord(0, "", 0, 0, None, True, None, "", False, 0, 0, "id", 0)

    async def emit_all() -> None:
        await sink.emit(Event(EventKind.RUN_STARTED, "r", 0))
        await sink.emit(Event(EventKind.STEP_STARTED, "r", 0))
        await sink.emit(
            Event(
                EventKind.STEP_COMPLETED,
                "r",
                0,
                step=step,
                model_result=ModelCallResult("r", "model-0", reply, None),
            )
        )

    asyncio.run(emit_all())
    (chat,) = telemetry.named("chat")
    attributes = dict(chat.attributes or {})
    usage_attributes = {k: v for k, v in attributes.items() if k.startswith("gen_ai.usage.")}
    expected = {_USAGE_KEYS[k]: v for k, v in usage.items() if k in _USAGE_KEYS}
    assert set(expected) == set(usage_attributes)
    for key in usage:
        assert key not in attributes or key in _USAGE_KEYS.values()
