"""Values and persistent records: the sink of the dependency graph.

A type lives here when it is a value (something that can be compared, stored or sent as is);
shells that exist only for the duration of one seam call live in :mod:`polyloop.ports`.
Nothing here imports another PolyLoop module except :mod:`polyloop.errors`.

Constructors reject only what is structurally impossible (a negative count, an empty
``call_id``, a model result that is both a reply and a failure). They never do I/O.

**Adding a field to a stored record.** :mod:`polyloop.serialization` derives how every record
is written and read from ``dataclasses.fields`` of the classes below, so a new field is declared
here only (plus ``session._loop``'s positional ``StepRecord`` construction, which a unit test
holds to the field order). Its annotation must be a type the serialization knows (``str``,
``int``, ``bool``, a ``StrEnum``, a nested record, ``X | None`` of those). A field added after
schema 1.0 must be declared ``dataclasses.field(default=..., metadata={"optional_on_read":
True})``: a stored payload without it then decodes to the default, and the encoders leave it
out while it equals its default, so logs of runs that never set it do not change. Without that
marker the field is required on read, and every log written before it existed is refused. A
library older than the field refuses a payload that carries it, naming record and field
(design 0023).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from polyloop._frozen import fast_frozen_init
from polyloop.errors import ConfigurationError

__all__ = [
    "CURRENT_SCHEMA_VERSION",
    "REQUESTS_USAGE_KEY",
    "RETRIES_USAGE_KEY",
    "ActionOutcome",
    "ActionStatus",
    "Budget",
    "CallNotExecuted",
    "ContentBlock",
    "Context",
    "Injection",
    "Intent",
    "IntentKind",
    "Message",
    "ModelCallResult",
    "ModelReply",
    "ReplayPolicy",
    "Role",
    "RunFinished",
    "RunResult",
    "RunStarted",
    "StepCompleted",
    "StepRecord",
    "StopReason",
    "SyntheticObservations",
    "TextBlock",
    "model_call_counts",
]

#: The one schema version this library writes and reads. Records that carry a version
#: (``RunStarted``, ``StepRecord``, ``RunResult``) default to it when built in code.
CURRENT_SCHEMA_VERSION = 1


#: Keys of ``ModelReply.usage`` and ``ModelCallResult.failure_usage`` that PolyLoop's retrying
#: client writes (design 0065): the HTTP requests one model call made, and how many of them were
#: retries. A call recorded without them made one request and no retry.
REQUESTS_USAGE_KEY: Final = "polyloop.requests"
RETRIES_USAGE_KEY: Final = "polyloop.retries"


def model_call_counts(result: ModelCallResult) -> tuple[int, int]:
    """``(requests, retries)`` of one recorded model call: the retrying client's counts when it
    wrote them (on the reply's usage, or the failure's), else one request and no retry."""
    usage = result.reply.usage if result.reply is not None else result.failure_usage
    if not usage:
        return 1, 0
    return usage.get(REQUESTS_USAGE_KEY, 1), usage.get(RETRIES_USAGE_KEY, 0)


def _usage_copy(owner: str, name: str, usage: object) -> Mapping[str, int]:
    if not isinstance(usage, Mapping):
        raise ConfigurationError(
            f"{owner}.{name} must be a mapping of str to int or None, got {type(usage).__name__}."
        )
    copy: dict[str, int] = {}
    for key, count in usage.items():
        if not isinstance(key, str):
            raise ConfigurationError(f"{owner}.{name} keys must be str, got {key!r}.")
        _require_count(owner, f"{name}[{key!r}]", count)
        copy[key] = count
    return MappingProxyType(copy)


def _require_count(owner: str, field: str, value: object) -> None:
    # bool is an int subclass; True as a count is always a caller's mistake.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(
            f"{owner}.{field} must be an int, got {type(value).__name__} {value!r}; "
            "pass a whole number."
        )
    if value < 0:
        raise ConfigurationError(
            f"{owner}.{field} must be >= 0, got {value}; counts and sizes cannot be negative."
        )


def _require_version(owner: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"{owner}.schema_version must be a positive int, got {value!r}; "
            f"leave it at its default ({CURRENT_SCHEMA_VERSION}) when building records in code."
        )


def _frozen_str_mapping(owner: str, field: str, value: Mapping[str, str]) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{owner}.{field} must be a mapping of str to str, got {type(value).__name__}."
        )
    copy: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise ConfigurationError(
                f"{owner}.{field} must map str to str; entry {key!r}: {item!r} is not. "
                "Convert every value to a string before handing it over."
            )
        copy[key] = item
    return MappingProxyType(copy)


# ---------------------------------------------------------------------------
# Messages and context
# ---------------------------------------------------------------------------


class Role(StrEnum):
    """Who speaks a message. Observations go back to the model as ``USER`` messages.

    ``TOOL`` was added after the seed (design 0046): in a run whose tools go to the model
    natively (``RunRequest.native_tools``), the observation of a step that made a tool call goes
    back as a ``TOOL`` message answering the assistant's call (see :class:`Message`).
    """

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class TextBlock:
    """A block of plain text inside a message; its size is its character count."""

    text: str


#: Every kind of block a message may hold. Only text today; a union later is a compatible change.
ContentBlock = TextBlock


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Message:
    """One message of a prompt.

    ``tool_call_id`` (added after the seed, design 0046) pairs a native tool call with its
    result: on an ``ASSISTANT`` message it says the message is a tool call — its text is the
    assistant's text followed by exactly one call in the canonical text form of
    ``polyloop.adapters.tool_calls`` — and names that call; on a ``TOOL`` message (where it is
    required) it names the call whose result the message is. ``SYSTEM`` and ``USER`` messages
    have none.
    """

    role: Role
    content: tuple[ContentBlock, ...]
    tool_call_id: str | None = None

    def __post_init__(self) -> None:
        if type(self.content) is not tuple and not isinstance(self.content, tuple):
            raise ConfigurationError(
                f"Message.content must be a tuple of TextBlock, got {type(self.content).__name__}; "
                "wrap the blocks in tuple(...)."
            )
        if self.tool_call_id is None and self.role is not Role.TOOL:
            return
        if not isinstance(self.tool_call_id, str) or not self.tool_call_id:
            raise ConfigurationError(
                f"Message.tool_call_id of a {str(self.role)!r} message must be a non-empty "
                f"string{'' if self.role is Role.TOOL else ' or None'}, got "
                f"{self.tool_call_id!r}; a tool message answers the call it names."
            )
        if self.role not in (Role.ASSISTANT, Role.TOOL):
            raise ConfigurationError(
                f"Message.tool_call_id is set on a {str(self.role)!r} message; only an "
                "assistant's tool call and a tool's result carry one."
            )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Context:
    """The rendered messages of a run, split by how often they change.

    ``run_level`` stays the same for the whole run and is sent first so that provider prefix
    caches stay warm; ``goal_level`` is specific to this one goal.
    """

    run_level: tuple[Message, ...]
    goal_level: tuple[Message, ...]


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Injection:
    """One entry pasted into the prompt from a channel (e.g. a skill)."""

    #: Identifier of the entry; reported in the run-started event, never interpreted.
    entry_id: str
    content: str


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class SyntheticObservations:
    """The fixed texts the library itself feeds back to the model.

    They are fixed strings, not templates: the library never composes what the model sees.
    """

    #: Fed back when a tool call names an unknown tool or has invalid arguments.
    action_rejected: str
    #: Fed back when the environment failed to execute an action.
    env_failed: str
    #: Recorded as the observation of the step whose model call failed.
    model_call_failed: str


# ---------------------------------------------------------------------------
# Enumerations
# ---------------------------------------------------------------------------


class ReplayPolicy(StrEnum):
    """May an interrupted call be executed again when a run resumes?

    ``NEVER``: it has side effects that must not repeat (the default for tools).
    ``SAFE``: it is idempotent; executing it twice is harmless.
    """

    NEVER = "never"
    SAFE = "safe"


class IntentKind(StrEnum):
    """Which side effect an :class:`Intent` announces."""

    MODEL_CALL = "model_call"
    ACTION = "action"


class ActionStatus(StrEnum):
    """How an attempted action settled."""

    EXECUTED = "executed"
    NOT_EXECUTED = "not_executed"
    ENV_ERROR = "env_error"


class StopReason(StrEnum):
    """Why a run stopped. The string values are matched verbatim by downstream analyses.

    ``TASK_COMPLETED`` means the environment confirmed the goal after an action (it reported
    completion, or a ``completes_run`` tool executed); ``AGENT_FINISHED`` means the model gave a
    final answer without touching the environment. Do not count them as the same thing.
    """

    TASK_COMPLETED = "task_completed"
    STEP_BUDGET = "step_budget"
    PARSE_FAILED_REPEATEDLY = "parse_failed_repeatedly"
    CONTEXT_OVERFLOW = "context_overflow"
    ENV_ERROR = "env_error"
    LLM_ERROR = "llm_error"
    AGENT_FINISHED = "agent_finished"
    ACTION_BUDGET = "action_budget"
    CANCELLED = "cancelled"
    RESUME_STATE_UNKNOWN = "resume_state_unknown"


# ---------------------------------------------------------------------------
# Seam return values
# ---------------------------------------------------------------------------


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ModelReply:
    """What the model returned for one call.

    ``finish_reason`` and ``usage`` were added after schema 1.0 (design 0024): a stored reply
    without them reads back with ``None``, and a reply that leaves them ``None`` is stored
    exactly as before.
    """

    #: Provider's identifier of the call; ``None`` when there is none, never ``""``.
    call_id: str | None
    content: str
    thinking: str
    #: Why the model stopped, in the provider's words (``"stop"``, ``"length"``,
    #: ``"tool_calls"``, ``"content_filter"``…); ``None`` when it did not say, never ``""``.
    finish_reason: str | None = field(default=None, metadata={"optional_on_read": True})
    #: Token counts the provider reported for this call, under its own names (``prompt_tokens``,
    #: ``completion_tokens``, nested details joined with ``.``); ``None`` when it reported none.
    usage: Mapping[str, int] | None = field(default=None, metadata={"optional_on_read": True})
    #: The model that answered, as the provider named it in its response (``"gpt-4o-2024-08-06"``
    #: for a request of ``"gpt-4o"``); ``None`` when the response did not say, never ``""``
    #: (design 0074).
    model: str | None = field(default=None, metadata={"optional_on_read": True})

    def __post_init__(self) -> None:
        if self.call_id == "":
            raise ConfigurationError(
                "ModelReply.call_id is the empty string; use None when the provider gave no id "
                "(an empty id would silently fail to join in analyses)."
            )
        if self.finish_reason is not None or self.usage is not None or self.model is not None:
            self._check_additions()

    def _check_additions(self) -> None:
        if self.finish_reason is not None and (
            not isinstance(self.finish_reason, str) or not self.finish_reason
        ):
            raise ConfigurationError(
                f"ModelReply.finish_reason must be a non-empty string or None, got "
                f"{self.finish_reason!r}; use None when the provider gave no reason."
            )
        if self.usage is not None:
            object.__setattr__(self, "usage", _usage_copy("ModelReply", "usage", self.usage))
        if self.model is not None and (not isinstance(self.model, str) or not self.model):
            raise ConfigurationError(
                f"ModelReply.model must be a non-empty string or None, got {self.model!r}; use "
                "None when the response did not name the model that answered."
            )

    def __reduce__(self) -> tuple[type[ModelReply], tuple[object, ...]]:
        # ``usage`` is a read-only view, which cannot be pickled or deep-copied.
        usage = None if self.usage is None else dict(self.usage)
        return (
            ModelReply,
            (self.call_id, self.content, self.thinking, self.finish_reason, usage, self.model),
        )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ActionOutcome:
    """What executing an action produced.

    An action that itself failed (code raised, a command exited non-zero) is ``EXECUTED``: its
    error is a normal observation. ``ENV_ERROR`` means the environment can no longer serve.
    """

    status: ActionStatus
    observation: str
    observation_is_synthetic: bool
    #: The environment says the goal is reached (not the agent's own claim).
    env_reported_completion: bool
    #: How many characters were cut from the observation before it was returned.
    observation_truncated_chars: int

    def __post_init__(self) -> None:
        if (
            type(self.status) is ActionStatus
            and type(self.observation_truncated_chars) is int
            and self.observation_truncated_chars >= 0
        ):
            return
        if not isinstance(self.status, ActionStatus):
            raise ConfigurationError(
                f"ActionOutcome.status must be an ActionStatus, got {self.status!r}."
            )
        _require_count(
            "ActionOutcome", "observation_truncated_chars", self.observation_truncated_chars
        )


# ---------------------------------------------------------------------------
# Budget, steps, results
# ---------------------------------------------------------------------------


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Budget:
    """The limits of one run. All four are required."""

    #: Upper bound on steps (model calls), whatever they did.
    max_steps: int
    #: Upper bound on executed actions; rejected tool calls do not count.
    max_actions: int
    #: Stop after this many parse failures in a row.
    max_consecutive_parse_failures: int
    #: Stop before a call whose prompt would exceed this many characters.
    max_prompt_chars: int

    def __post_init__(self) -> None:
        for name in (
            "max_steps",
            "max_actions",
            "max_consecutive_parse_failures",
            "max_prompt_chars",
        ):
            _require_count("Budget", name, getattr(self, name))


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class CallNotExecuted:
    """A tool call the model made in a reply but the step did not execute (design 0045).

    A step executes one action; a reply carrying several calls has its first one executed and
    the rest recorded as these, in the order the model made them.
    """

    tool_name: str
    #: Canonical JSON of the arguments (sorted keys, no spaces), or the raw text the model sent
    #: when it was not a JSON object.
    tool_arguments: str


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class StepRecord:
    """One row of a trajectory: what happened in one step.

    The first thirteen fields keep dissect's names and meaning verbatim; the next five are new
    and have defaults, so an old thirteen-field row can still be built in code; the ones after
    ``schema_version`` were added after schema 1.0 and are left out of the encoding while they
    hold their default.
    """

    step_idx: int
    #: The assistant text put into history (the parser's ``history_text``).
    raw_output: str
    #: Length of ``ModelReply.content``.
    content_chars: int
    #: Length of ``ModelReply.thinking``.
    thinking_chars: int
    #: ``Action.text`` when the step attempted an action.
    action: str | None
    parse_ok: bool
    parse_error: str | None
    #: The text put into history, before the observation template wraps it.
    observation: str
    observation_is_synthetic: bool
    observation_truncated_chars: int
    #: Total characters of all text blocks sent in this step's model call.
    prompt_chars: int
    call_id: str | None
    step_wall_ms: int
    tool_name: str | None = None
    #: Canonical JSON of the arguments (sorted keys, no spaces).
    tool_arguments: str | None = None
    action_status: ActionStatus | None = None
    env_reported_completion: bool = False
    schema_version: int = CURRENT_SCHEMA_VERSION
    #: The reply's tool calls after the one this step executed, none of them executed (design
    #: 0045). The model saw them named after the observation; the encoders leave the field out
    #: while it is empty, so logs of replies with at most one call are what they were.
    calls_not_executed: tuple[CallNotExecuted, ...] = field(
        default=(), metadata={"optional_on_read": True}
    )

    def __post_init__(self) -> None:
        # One cheap expression for the common case; the detailed checks only run (and say
        # what is wrong) when it fails. A record is built for every step of every run.
        if (
            type(self.step_idx) is int
            and self.step_idx >= 0
            and type(self.content_chars) is int
            and self.content_chars >= 0
            and type(self.thinking_chars) is int
            and self.thinking_chars >= 0
            and type(self.observation_truncated_chars) is int
            and self.observation_truncated_chars >= 0
            and type(self.prompt_chars) is int
            and self.prompt_chars >= 0
            and type(self.step_wall_ms) is int
            and self.step_wall_ms >= 0
            and self.call_id != ""
            and (self.action_status is None or type(self.action_status) is ActionStatus)
            and type(self.schema_version) is int
            and self.schema_version >= 1
            and type(self.calls_not_executed) is tuple
        ):
            return
        if not isinstance(self.calls_not_executed, tuple) or not all(
            isinstance(call, CallNotExecuted) for call in self.calls_not_executed
        ):
            raise ConfigurationError(
                "StepRecord.calls_not_executed must be a tuple of CallNotExecuted, got "
                f"{self.calls_not_executed!r}."
            )
        for name in (
            "step_idx",
            "content_chars",
            "thinking_chars",
            "observation_truncated_chars",
            "prompt_chars",
            "step_wall_ms",
        ):
            _require_count("StepRecord", name, getattr(self, name))
        if self.call_id == "":
            raise ConfigurationError(
                "StepRecord.call_id is the empty string; use None when there is no call id."
            )
        if self.action_status is not None and not isinstance(self.action_status, ActionStatus):
            raise ConfigurationError(
                f"StepRecord.action_status must be an ActionStatus or None, got {self.action_status!r}."
            )
        _require_version("StepRecord", self.schema_version)


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RunResult:
    """How a run ended, with its whole trajectory."""

    run_id: str
    stop_reason: StopReason
    final_answer: str | None
    steps: tuple[StepRecord, ...]
    schema_version: int = CURRENT_SCHEMA_VERSION
    #: Events the sink failed to take during this run (the run-finished event cannot count itself).
    event_delivery_failures: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.stop_reason, StopReason):
            raise ConfigurationError(
                f"RunResult.stop_reason must be a StopReason, got {self.stop_reason!r}."
            )
        if not isinstance(self.steps, tuple):
            raise ConfigurationError(
                f"RunResult.steps must be a tuple of StepRecord, got {type(self.steps).__name__}."
            )
        _require_version("RunResult", self.schema_version)
        _require_count("RunResult", "event_delivery_failures", self.event_delivery_failures)


# ---------------------------------------------------------------------------
# The five log records
# ---------------------------------------------------------------------------


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RunStarted:
    """Head of a run log: the parameters the run was started with.

    ``follows_run_id`` and ``queued_input`` were added after schema 1.0 (design 0052): a
    follow-up run (the next turn of a conversation, ``polyloop.session.follow_up``) names the
    run it continues and the user's input it was started with; both are set or both ``None``,
    and a run that is no follow-up is stored exactly as before. The three ``fork`` fields
    (design 0067) are added the same way: a fork names its source run and the step its own
    agent started at. ``started_at`` was added after them (design 0061): a log written before
    it reads as ``None``; then ``fork_replayed_prefix`` (design 0072), ``False`` when absent.
    """

    run_id: str
    parameter_snapshot: Mapping[str, str]
    schema_version: int = CURRENT_SCHEMA_VERSION
    #: The run whose history this run continues; ``None`` for a run that starts a conversation.
    follows_run_id: str | None = field(default=None, metadata={"optional_on_read": True})
    #: The user's new input this follow-up run was started with (seed 002's ``queued_input``).
    queued_input: str | None = field(default=None, metadata={"optional_on_read": True})
    #: The run this one was forked from (design 0067): its records of the steps before
    #: ``forked_at_step`` were copied into this log; ``None`` for a run that is no fork.
    forked_from_run_id: str | None = field(default=None, metadata={"optional_on_read": True})
    #: The first step this run's own agent took; the steps before it are the source's.
    forked_at_step: int | None = field(default=None, metadata={"optional_on_read": True})
    #: Step ``forked_at_step - 1`` was in doubt in the source (an action announced, never
    #: settled): the fork recorded it ``not_executed`` by an explicit choice, so whether the
    #: world saw that action is unknown.
    fork_left_in_doubt: bool = field(default=False, metadata={"optional_on_read": True})
    #: When the loop wrote this record: UTC, ISO 8601 to the second, as ``UserAsked.asked_at``
    #: (design 0061). ``None`` in logs written before the field existed. Not in the parameter
    #: snapshot, so a resume never compares it.
    started_at: str | None = field(default=None, metadata={"optional_on_read": True})
    #: A fork only (design 0072): its executor's fresh, isolated session was brought to
    #: ``forked_at_step`` by executing the prefix's executed tool-less actions again in it
    #: (:class:`polyloop.ports.PrefixReplaying`); ``False``: the fork went on against the
    #: environment as it was.
    fork_replayed_prefix: bool = field(default=False, metadata={"optional_on_read": True})

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "parameter_snapshot",
            _frozen_str_mapping("RunStarted", "parameter_snapshot", self.parameter_snapshot),
        )
        _require_version("RunStarted", self.schema_version)
        if self.started_at is not None and (
            not isinstance(self.started_at, str) or not self.started_at
        ):
            raise ConfigurationError(
                f"RunStarted.started_at must be a non-empty ISO 8601 time or None, got "
                f"{self.started_at!r} for run {self.run_id!r}."
            )
        if self.follows_run_id is not None or self.queued_input is not None:
            self._check_follow_up()
        if (
            self.forked_from_run_id is not None
            or self.forked_at_step is not None
            or self.fork_left_in_doubt is not False
            or self.fork_replayed_prefix is not False
        ):
            self._check_fork()

    def _check_fork(self) -> None:
        source, at = self.forked_from_run_id, self.forked_at_step
        if (source is None) != (at is None):
            raise ConfigurationError(
                f"RunStarted of run {self.run_id!r} sets "
                f"{'forked_from_run_id' if source is not None else 'forked_at_step'} without "
                f"{'forked_at_step' if source is not None else 'forked_from_run_id'}; a fork names "
                "the run it was forked from and the step, both or neither."
            )
        if source is not None and (
            not isinstance(source, str) or not source or source == self.run_id
        ):
            raise ConfigurationError(
                f"RunStarted.forked_from_run_id must name another run, got {source!r} for run "
                f"{self.run_id!r}."
            )
        if at is not None and (type(at) is not int or at < 0):
            raise ConfigurationError(
                f"RunStarted.forked_at_step must be an integer >= 0, got {at!r}."
            )
        if type(self.fork_left_in_doubt) is not bool:
            raise ConfigurationError(
                f"RunStarted.fork_left_in_doubt must be a bool, got {self.fork_left_in_doubt!r}."
            )
        if type(self.fork_replayed_prefix) is not bool:
            raise ConfigurationError(
                "RunStarted.fork_replayed_prefix must be a bool, got "
                f"{self.fork_replayed_prefix!r}."
            )
        if self.fork_replayed_prefix and at is None:
            raise ConfigurationError(
                f"RunStarted of run {self.run_id!r} says fork_replayed_prefix but is no fork; "
                "only a fork has a prefix to replay."
            )
        if self.fork_left_in_doubt and (at is None or at < 1):
            raise ConfigurationError(
                f"RunStarted of run {self.run_id!r} says fork_left_in_doubt but is no fork after "
                "step 0; only a fork's last copied step can be left in doubt."
            )

    def _check_follow_up(self) -> None:
        follows, queued = self.follows_run_id, self.queued_input
        if (follows is None) != (queued is None):
            raise ConfigurationError(
                f"RunStarted of run {self.run_id!r} sets "
                f"{'follows_run_id' if follows is not None else 'queued_input'} without "
                f"{'queued_input' if follows is not None else 'follows_run_id'}; a follow-up run "
                "names the run it continues and the input it starts with, both or neither."
            )
        if not isinstance(follows, str) or not follows or follows == self.run_id:
            raise ConfigurationError(
                f"RunStarted.follows_run_id must name another run, got {follows!r} for run "
                f"{self.run_id!r}."
            )
        if not isinstance(queued, str):
            raise ConfigurationError(
                f"RunStarted.queued_input must be a string, got {type(queued).__name__}."
            )

    def __reduce__(
        self,
    ) -> tuple[type[RunStarted], tuple[object, ...]]:
        # The read-only snapshot view cannot be pickled or deep-copied; rebuild from a dict.
        return (
            RunStarted,
            (
                self.run_id,
                dict(self.parameter_snapshot),
                self.schema_version,
                self.follows_run_id,
                self.queued_input,
                self.forked_from_run_id,
                self.forked_at_step,
                self.fork_left_in_doubt,
                self.started_at,
                self.fork_replayed_prefix,
            ),
        )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Intent:
    """Written before a side effect: what is about to happen and where its result will go."""

    run_id: str
    kind: IntentKind
    #: The model-call index of the step this intent belongs to (both intents of a step share it).
    call_index: int
    #: Identifier the result will be stored under; pre-allocated by the library.
    result_id: str
    replay_policy: ReplayPolicy

    def __post_init__(self) -> None:
        if (
            type(self.kind) is IntentKind
            and type(self.replay_policy) is ReplayPolicy
            and type(self.call_index) is int
            and self.call_index >= 0
            and self.result_id
        ):
            return
        if not isinstance(self.kind, IntentKind):
            raise ConfigurationError(f"Intent.kind must be an IntentKind, got {self.kind!r}.")
        if not isinstance(self.replay_policy, ReplayPolicy):
            raise ConfigurationError(
                f"Intent.replay_policy must be a ReplayPolicy, got {self.replay_policy!r}."
            )
        _require_count("Intent", "call_index", self.call_index)
        if not self.result_id:
            raise ConfigurationError("Intent.result_id is empty; result ids must be non-empty.")


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ModelCallResult:
    """The settled result of a model call: exactly one of ``reply`` and ``failure`` is set.

    ``failure_usage`` (added after schema 1.0, design 0065) holds what a call that failed still
    cost, taken from the raised error's ``usage`` mapping (a retrying client reports
    ``polyloop.requests`` and ``polyloop.retries`` there); ``None`` when there is a reply (its
    counts are ``reply.usage``) or the error reported nothing.
    """

    run_id: str
    result_id: str
    reply: ModelReply | None
    #: ``"<ExceptionType>: <message>"`` when the call raised.
    failure: str | None
    failure_usage: Mapping[str, int] | None = field(
        default=None, metadata={"optional_on_read": True}
    )

    def __post_init__(self) -> None:
        if (self.reply is None) == (self.failure is None):
            state = "both" if self.reply is not None else "neither"
            raise ConfigurationError(
                f"ModelCallResult for result_id {self.result_id!r} has {state} of reply and "
                "failure; set reply for a successful call or failure for one that raised."
            )
        if not self.result_id:
            raise ConfigurationError("ModelCallResult.result_id is empty.")
        if self.failure_usage is not None:
            if self.reply is not None:
                raise ConfigurationError(
                    "ModelCallResult.failure_usage is set on a call with a reply; a reply's "
                    "counts belong in ModelReply.usage."
                )
            object.__setattr__(
                self,
                "failure_usage",
                _usage_copy("ModelCallResult", "failure_usage", self.failure_usage),
            )

    def __reduce__(self) -> tuple[type[ModelCallResult], tuple[object, ...]]:
        # ``failure_usage`` is a read-only view, which cannot be pickled or deep-copied.
        usage = None if self.failure_usage is None else dict(self.failure_usage)
        return (ModelCallResult, (self.run_id, self.result_id, self.reply, self.failure, usage))


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class StepCompleted:
    """One finished step: its record and, when an action intent was written, the action's result.

    ``result_id`` and ``action_outcome`` are both set (the step wrote an action intent) or both
    ``None`` (it did not). Both fields are required so every caller states which it is.
    """

    run_id: str
    result_id: str | None
    action_outcome: ActionOutcome | None
    step: StepRecord
    #: The call of this step that ``resume`` made again because a crash had left it in doubt:
    #: ``MODEL_CALL`` (the model was called again) or ``ACTION`` (the action was executed
    #: again, its replay policy being ``safe``); ``None`` when nothing was made twice. Added
    #: after schema 1.0 (design 0048): a stored record without it reads back ``None``.
    replayed_on_resume: IntentKind | None = field(default=None, metadata={"optional_on_read": True})

    def __post_init__(self) -> None:
        if self.replayed_on_resume is not None:
            self._check_replay()
        if (self.result_id is None) != (self.action_outcome is None):
            raise ConfigurationError(
                f"StepCompleted for step {self.step.step_idx} of run {self.run_id!r} has "
                f"result_id={self.result_id!r} but action_outcome="
                f"{'set' if self.action_outcome is not None else 'None'}; set both when the "
                "step wrote an action intent, neither when it did not."
            )
        if self.result_id == "":
            raise ConfigurationError("StepCompleted.result_id is empty; use None for no action.")

    def _check_replay(self) -> None:
        replayed = self.replayed_on_resume
        if not isinstance(replayed, IntentKind):
            raise ConfigurationError(
                f"StepCompleted.replayed_on_resume must be an IntentKind or None, got {replayed!r}."
            )
        if replayed is IntentKind.ACTION and self.result_id is None:
            raise ConfigurationError(
                f"StepCompleted for step {self.step.step_idx} of run {self.run_id!r} says its "
                "action was replayed on resume but records no action; leave replayed_on_resume "
                "None, or set result_id and action_outcome."
            )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RunFinished:
    """Tail of a run log. The stop reason lives in the result, once."""

    run_id: str
    result: RunResult
