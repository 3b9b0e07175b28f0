"""Deliberately broken parsers, model clients, executors and sinks, with the rule that catches each.

Each seam also has a ``good`` variant (from :mod:`polyloop.testing`) that must pass.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import socket
import time
from collections.abc import Mapping

from polyloop.ports import Action, Event, InvalidDecision, ModelCall, ParsedReply
from polyloop.testing import (
    LineDecisionParser,
    RecordingEventSink,
    ScriptedExecutor,
    ScriptedModelClient,
    reply,
)
from polyloop.types import ActionOutcome, ActionStatus, ModelReply

# ---------------------------------------------------------------------------
# DecisionParser
# ---------------------------------------------------------------------------


class RaisesOnOpenFence(LineDecisionParser):
    """Assumes every code fence is closed."""

    def parse(self, reply: ModelReply) -> ParsedReply:
        if reply.content.count("```") % 2:
            raise ValueError("unbalanced code fence")
        return super().parse(reply)


class SilentInvalidDecision(LineDecisionParser):
    """Gives the model nothing to go on when it cannot read the reply."""

    def parse(self, reply: ModelReply) -> ParsedReply:
        parsed = super().parse(reply)
        if isinstance(parsed.decision, InvalidDecision):
            return ParsedReply(parsed.history_text, InvalidDecision(""))
        return parsed


class NumbersItsReplies(LineDecisionParser):
    """Stamps a running number into history, so parsing twice differs."""

    def __init__(self) -> None:
        self.count = itertools.count()

    def parse(self, reply: ModelReply) -> ParsedReply:
        parsed = super().parse(reply)
        return ParsedReply(f"[{next(self.count)}] {parsed.history_text}", parsed.decision)


class LogsToAFile(LineDecisionParser):
    """Appends every reply it parses to a log file."""

    def parse(self, reply: ModelReply) -> ParsedReply:
        with open("/dev/null", "a", encoding="utf-8", errors="replace") as log:
            log.write(reply.content[:10])
        return super().parse(reply)


class ImportsLazily(LineDecisionParser):
    """Correct: imports a helper module on its first call (not I/O in the rules' sense)."""

    def __init__(self) -> None:
        self.loaded = False

    def parse(self, reply: ModelReply) -> ParsedReply:
        if not self.loaded:  # what a first import does: find and read the module's files
            import wave

            importlib.reload(wave)
            self.loaded = True
        return super().parse(reply)


PARSERS = {
    "good": LineDecisionParser,
    "good_imports_lazily": ImportsLazily,
    "raises_on_open_fence": RaisesOnOpenFence,
    "silent_invalid_decision": SilentInvalidDecision,
    "numbers_its_replies": NumbersItsReplies,
    "logs_to_a_file": LogsToAFile,
}

# ---------------------------------------------------------------------------
# ModelClient
# ---------------------------------------------------------------------------


def good_client() -> ScriptedModelClient:
    return ScriptedModelClient([reply("FINAL: 42")] * 4)


class SwallowsCancellation:
    """Waits for the backend and, when cancelled, answers with an empty reply instead."""

    async def call(self, call: ModelCall) -> ModelReply:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return ModelReply(None, "", "")
        return ModelReply(None, "late", "")

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "swallows-cancellation"}


class PutsItsKeyInParameters(ScriptedModelClient):
    """Reports its API key as a parameter."""

    def parameters(self) -> Mapping[str, str]:
        return {**super().parameters(), "api_key": "sk-test-1234"}


MODEL_CLIENTS = {
    "good": good_client,
    "swallows_cancellation": SwallowsCancellation,
    "puts_its_key_in_parameters": lambda: PutsItsKeyInParameters([reply("FINAL: 42")] * 4),
}


class EmptyReplyOnOutage:
    """Turns a backend failure into an empty reply."""

    async def call(self, call: ModelCall) -> ModelReply:
        return ModelReply(None, "", "")

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "empty-reply-on-outage"}


FAILING_MODEL_CLIENTS = {
    "good": lambda: ScriptedModelClient([ConnectionError("backend down")]),
    "empty_reply_on_outage": EmptyReplyOnOutage,
}

# ---------------------------------------------------------------------------
# ActionExecutor
# ---------------------------------------------------------------------------


def _gone(text: str) -> str:
    raise ConnectionResetError("session is gone")


class ExecutedOnDeadSession:
    """Reports a dead session's error as an ordinary executed action."""

    async def execute(self, action: Action) -> ActionOutcome:
        return ActionOutcome(ActionStatus.EXECUTED, "error: session is gone", True, False, 0)

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "executed-on-dead-session"}


FAILING_EXECUTORS = {
    "good": lambda: ScriptedExecutor(_gone),
    "executed_on_dead_session": ExecutedOnDeadSession,
}

# ---------------------------------------------------------------------------
# EventSink
# ---------------------------------------------------------------------------


class TagsTheEvent(RecordingEventSink):
    """Marks every run-started event it has seen, in the event itself."""

    async def emit(self, event: Event) -> None:
        entries = event.injection_entry_ids
        if isinstance(entries, dict):
            entries["seen_by_sink"] = ("yes",)
        await super().emit(event)


class AsksItsBackendInParameters(RecordingEventSink):
    """Looks up its backend's address every time it reports parameters."""

    def parameters(self) -> Mapping[str, str]:
        try:
            address = str(socket.getaddrinfo("localhost", 8125)[0][4][0])
        except OSError:
            address = "unresolved"
        return {"kind": "asks-its-backend", "backend": address}


class SlowParameters(RecordingEventSink):
    """Waits for its backend to report a version."""

    def parameters(self) -> Mapping[str, str]:
        time.sleep(0.25)
        return {"kind": "slow-parameters"}


SINKS = {
    "good": RecordingEventSink,
    "tags_the_event": TagsTheEvent,
    "asks_its_backend_in_parameters": AsksItsBackendInParameters,
    "slow_parameters": SlowParameters,
}

#: For each broken seam: the test (suite::name[variant]) that must fail, and its rule.
CAUGHT_BY: Mapping[str, tuple[str, str]] = {
    "decision_parser::test_parse_never_raises[raises_on_open_fence]": (
        "DecisionParser",
        "parse never raises",
    ),
    "decision_parser::test_parse_returns_a_parsed_reply[silent_invalid_decision]": (
        "DecisionParser",
        "an InvalidDecision says what to fix",
    ),
    "decision_parser::test_parse_is_repeatable[numbers_its_replies]": (
        "DecisionParser",
        "parse is repeatable",
    ),
    "decision_parser::test_parse_is_synchronous_and_does_no_io[logs_to_a_file]": (
        "DecisionParser",
        "parse is synchronous and does no I/O",
    ),
    "model_client::test_cancellation_passes_through[swallows_cancellation]": (
        "ModelClient",
        "cancellation passes through",
    ),
    "model_client::test_parameters_are_stable_and_hold_no_secrets[puts_its_key_in_parameters]": (
        "ModelClient",
        "parameters() holds no secrets",
    ),
    "model_client::test_failure_is_an_exception[empty_reply_on_outage]": (
        "ModelClient",
        "failure is an exception, not an empty reply",
    ),
    "action_executor::test_environment_failure_is_env_error[executed_on_dead_session]": (
        "ActionExecutor",
        "environment failure is ENV_ERROR",
    ),
    "event_sink::test_emit_leaves_the_event_unchanged[tags_the_event]": (
        "EventSink",
        "emit leaves the event unchanged",
    ),
    "event_sink::test_parameters_do_no_io_and_are_cheap[asks_its_backend_in_parameters]": (
        "EventSink",
        "parameters() does no I/O",
    ),
    "event_sink::test_parameters_do_no_io_and_are_cheap[slow_parameters]": (
        "EventSink",
        "parameters() is cheap",
    ),
}
