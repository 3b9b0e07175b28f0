"""Trace ids derived from run ids: every invocation of one run lands in one trace (designs
0049, 0062).

A run outlives its processes: the invocation that crashed and the ``resume`` that finished it
never share memory, and the run log holds no telemetry. Deriving the trace id from the run id
alone lets each invocation find the same trace without storing anything.

Each invocation is a root span of that trace (design 0062): receivers list root spans (Phoenix's
Spans view shows nothing else by default), and a parent that is never exported hid every
invocation there. The SDK takes a root's trace id from its tracer's id generator, so the sink's
tracer gets :class:`RunTraceIds`, which hands out the run's id while the sink starts an
invocation. A tracer that is not the SDK's cannot be steered so: there the invocation hangs
under the run as a remote, never exported parent span (:func:`run_context`), as in design 0049.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from contextvars import ContextVar

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

__all__ = [
    "RunTraceIds",
    "root_trace_id",
    "run_context",
    "run_span_id",
    "run_trace_id",
    "steer_trace_ids",
]

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


#: The trace id the next root span of this thread (or task) gets; ``None``: a random one.
_NEXT_TRACE_ID: ContextVar[int | None] = ContextVar("polyloop_otel_trace_id", default=None)


class RunTraceIds(IdGenerator):
    """The tracer's own id generator, except that a root started inside
    :func:`root_trace_id` gets the run's trace id."""

    __slots__ = ("_inner",)

    def __init__(self, inner: IdGenerator) -> None:
        self._inner = inner

    def generate_span_id(self) -> int:
        return self._inner.generate_span_id()

    def generate_trace_id(self) -> int:
        wanted = _NEXT_TRACE_ID.get()
        return self._inner.generate_trace_id() if wanted is None else wanted

    def is_trace_id_random(self) -> bool:
        return _NEXT_TRACE_ID.get() is None and self._inner.is_trace_id_random()


def steer_trace_ids(tracer: trace.Tracer) -> bool:
    """Give an SDK tracer :class:`RunTraceIds`; whether it could be (it is the SDK's)."""
    if not isinstance(tracer, SdkTracer):
        return False
    if not isinstance(tracer.id_generator, RunTraceIds):
        tracer.id_generator = RunTraceIds(tracer.id_generator)
    return True


@contextlib.contextmanager
def root_trace_id(run_id: str) -> Iterator[Context]:
    """Inside the block, a root span started in the context it gives is in ``run_id``'s trace."""
    token = _NEXT_TRACE_ID.set(run_trace_id(run_id))
    try:
        yield Context()
    finally:
        _NEXT_TRACE_ID.reset(token)
