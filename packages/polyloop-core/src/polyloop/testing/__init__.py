"""A public, typed testing kit: scripted seams, and run-log records built by hand.

Scripted seams, for tests, examples and benchmarks (none does I/O; all report parameters as
the seams require):

- :class:`ScriptedModelClient` returns (or raises) a prepared sequence of replies.
- :class:`LineDecisionParser` reads a tiny line protocol (``FINAL:``, ``CALL``, ``RUN:``).
- :class:`ScriptedExecutor` executes tool-less actions with a function you give it.
- :class:`RecordingEventSink` keeps every event; :class:`NullEventSink` drops them.

Record builders, for tests of stores, log tools and resume: :func:`run_started`, the steps
(:func:`tool_step`, :func:`code_step`, :func:`final_step`, :func:`parse_failure_step`,
:func:`model_failure_step`, each a :class:`StepWrites` of the records the loop writes for
it), :func:`run_finished`; :func:`write_records` hands records to a store and
:func:`run_log_from` says what a correct store then reads back.
"""

from __future__ import annotations

from polyloop.testing._records import (
    StepWrites,
    code_step,
    final_step,
    model_failure_step,
    parse_failure_step,
    run_finished,
    run_log_from,
    run_started,
    tool_step,
    write_records,
)
from polyloop.testing._scripted import (
    LineDecisionParser,
    NullEventSink,
    RecordingEventSink,
    ScriptedExecutor,
    ScriptedModelClient,
    ScriptExhaustedError,
    reply,
)
from polyloop.testing._scripted import (
    ScriptEntry as ScriptEntry,
)

__all__ = [
    "LineDecisionParser",
    "NullEventSink",
    "RecordingEventSink",
    "ScriptExhaustedError",
    "ScriptedExecutor",
    "ScriptedModelClient",
    "StepWrites",
    "code_step",
    "final_step",
    "model_failure_step",
    "parse_failure_step",
    "reply",
    "run_finished",
    "run_log_from",
    "run_started",
    "tool_step",
    "write_records",
]
