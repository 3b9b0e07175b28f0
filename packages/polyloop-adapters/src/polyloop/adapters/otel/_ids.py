"""Trace ids derived from run ids: every invocation of one run lands in one trace (design 0049).

A run outlives its processes: the invocation that crashed and the ``resume`` that finished it
never share memory, and the run log holds no telemetry. Deriving the ids from the run id alone
lets each invocation find the same trace without storing anything: the run is the (remote,
never exported) parent span of its invocations, with a trace id and a span id that are pure
functions of the run id.
"""

from __future__ import annotations

import hashlib

from opentelemetry.context import Context
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

__all__ = ["run_context", "run_span_id", "run_trace_id"]

_DOMAIN = b"polyloop.run\x00"


def _digest(run_id: str) -> bytes:
    return hashlib.sha256(_DOMAIN + run_id.encode("utf-8", "surrogatepass")).digest()


def run_trace_id(run_id: str) -> int:
    """The 128-bit trace id of run ``run_id`` (never 0, which OpenTelemetry calls invalid)."""
    return int.from_bytes(_digest(run_id)[:16], "big") or 1


def run_span_id(run_id: str) -> int:
    """The 64-bit span id of the run itself: the parent of each of its invocation spans."""
    return int.from_bytes(_digest(run_id)[16:24], "big") or 1


def run_context(run_id: str) -> Context:
    """A context whose current span is the run (remote, sampled), to start an invocation in."""
    parent = SpanContext(
        trace_id=run_trace_id(run_id),
        span_id=run_span_id(run_id),
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return set_span_in_context(NonRecordingSpan(parent))
