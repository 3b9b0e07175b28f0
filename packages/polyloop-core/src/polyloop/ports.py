"""The five seams (``typing.Protocol``) and the shells that exist only for one call.

Structural typing, not base classes: a downstream object usually already has a class of its
own and a wider interface of its project; a Protocol lets the same object satisfy both.
No third-party type appears in any signature here (``tests/core/test_import_purity.py``).

A type lives here when it only packs the arguments or the return of one seam call; values and
persistent records live in :mod:`polyloop.types` (which must never import this module).

The behaviour every implementation must guarantee is stated in each seam's docstring; the
executable form is the ``polyloop-contract`` pytest plugin.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Protocol, runtime_checkable

from polyloop._frozen import fast_frozen_init
from polyloop._lease import LeaseHolder
from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.types import (
    ActionOutcome,
    CallNotExecuted,
    Intent,
    Message,
    ModelCallResult,
    ModelReply,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
)

__all__ = [
    "Action",
    "ActionExecutor",
    "BatchedRecord",
    "Decision",
    "DecisionParser",
    "Event",
    "EventKind",
    "EventSink",
    "FinalAnswer",
    "InvalidDecision",
    "LeaseHolder",
    "ModelCall",
    "ModelClient",
    "ParsedReply",
    "PrefixReplaying",
    "RecordBatching",
    "RecordCopying",
    "RunLease",
    "RunLeasing",
    "RunListing",
    "RunLog",
    "RunStore",
    "StoreClosing",
    "ToolCall",
    "UserAsking",
    "supports_prefix_replay",
    "supports_record_batching",
    "supports_record_copying",
    "supports_user_asking",
]

# ---------------------------------------------------------------------------
# Shells of one call
# ---------------------------------------------------------------------------


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ModelCall:
    """One call handed to the model seam."""

    messages: tuple[Message, ...]
    #: Index of this model call within the run, from 0. Not "which independent retry of the
    #: same goal": that is the project's own metadata and travels in ``binding``.
    call_index: int
    run_id: str
    #: Identifier pre-allocated by the library for this call's result.
    result_id: str
    #: The project's own keys (``RunRequest.model_binding``), passed through uninterpreted.
    binding: Mapping[str, str]
    #: The request's tools as shown to the model (``RunRequest.tools.schema_for_model()``: one
    #: ``{"name", "description", "parameters"}`` object per tool), for a client that sends them
    #: natively; empty for a tool-less run. Added after the seed (design 0024). The loop hands
    #: every call of a run the same objects: read them, never change them.
    tools: tuple[Mapping[str, object], ...] = ()

    def __reduce__(self) -> tuple[type[ModelCall], tuple[object, ...]]:
        # ``binding`` is usually a read-only view, which cannot be pickled or deep-copied.
        return (
            ModelCall,
            (
                self.messages,
                self.call_index,
                self.run_id,
                self.result_id,
                dict(self.binding),
                self.tools,
            ),
        )


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ToolCall:
    """Name and arguments of one tool call."""

    name: str
    arguments: Mapping[str, object]


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Action:
    """An action the parser read from a reply."""

    #: How this step's action appears in the trajectory (``StepRecord.action``); its content is
    #: the parser's choice (dissect: the Python source; tool agents: the serialized call).
    text: str
    #: Set for tool actions; ``None`` for tool-less actions such as a block of code.
    tool_call: ToolCall | None


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class FinalAnswer:
    """The model's final answer. The environment is not touched."""

    text: str


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class InvalidDecision:
    """No valid action could be read from the reply."""

    #: Fed back to the model verbatim as the observation; make it say what to fix.
    explanation: str


#: The three ways a reply can be read.
Decision = Action | FinalAnswer | InvalidDecision


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class ParsedReply:
    """What the parser returns for one reply."""

    #: The assistant text this step puts into history. It may differ from the raw reply: a
    #: parser may drop what follows the first code block (models often invent its output).
    history_text: str
    decision: Decision
    #: The reply's tool calls that this step will not execute, in the model's order: every call
    #: after the first (a step executes one action; design 0045). The loop records them in
    #: ``StepRecord.calls_not_executed``, names them to the model after the observation, and
    #: emits ``CALLS_NOT_EXECUTED``. Added after the seed; a parser that reads one call per
    #: reply leaves it empty.
    calls_not_executed: tuple[CallNotExecuted, ...] = ()


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class RunLog:
    """A whole run log as read back. ``RunLog()`` is the log of a run never written.

    ``asks`` and ``answers`` (design 0037) hold the records of a run that asked a person; they
    are empty for every other run, and a store without :class:`UserAsking` never fills them.
    """

    started: RunStarted | None = None
    intents: tuple[Intent, ...] = ()
    model_results: tuple[ModelCallResult, ...] = ()
    steps: tuple[StepCompleted, ...] = ()
    finished: RunFinished | None = None
    asks: tuple[UserAsked, ...] = ()
    answers: tuple[UserAnswered, ...] = ()


_NO_ENTRIES: Mapping[str, tuple[str, ...]] = MappingProxyType({})
_NO_PARAMETERS: Mapping[str, str] = MappingProxyType({})


class EventKind(StrEnum):
    """The events a run emits, in the order they can occur (see research-wiki/design/0009-events.md)."""

    RUN_STARTED = "run_started"
    STEP_STARTED = "step_started"
    #: Emitted just before ``STEP_COMPLETED`` by a step whose reply carried tool calls it did
    #: not execute; ``step`` is the record, which names them (design 0045).
    CALLS_NOT_EXECUTED = "calls_not_executed"
    STEP_COMPLETED = "step_completed"
    RUN_FINISHED = "run_finished"
    #: The run waits for a person: its ask is recorded and the lease is given back. Last
    #: event of that invocation (no ``RUN_FINISHED`` follows: the run has not stopped).
    RUN_PARKED = "run_parked"


@fast_frozen_init
@dataclass(frozen=True, slots=True)
class Event:
    """One event sent to the event sink. Observation only: nothing a sink does steers the run.

    ``step_idx`` is the step the event is about: for ``STEP_STARTED``/``STEP_COMPLETED`` that
    step; for ``RUN_STARTED`` the first step this invocation will execute (0 on ``run``, the
    number of recorded steps on ``resume``); for ``RUN_FINISHED`` the number of steps recorded.
    """

    kind: EventKind
    run_id: str
    step_idx: int
    #: ``RUN_STARTED`` only: ``True`` when emitted by ``resume``.
    resumed: bool = False
    #: ``RUN_STARTED`` only: the injection entry ids by channel, in prompt order.
    injection_entry_ids: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _NO_ENTRIES)
    #: ``STEP_COMPLETED`` and ``CALLS_NOT_EXECUTED`` only: the record just written.
    step: StepRecord | None = None
    #: ``RUN_FINISHED`` only: the result just written.
    result: RunResult | None = None
    #: ``RUN_STARTED`` only: the run's parameter snapshot, as its ``RunStarted`` records it
    #: (never a secret: see :meth:`RunStore.parameters`). Added by design 0050.
    parameter_snapshot: Mapping[str, str] = field(default_factory=lambda: _NO_PARAMETERS)
    #: ``RUN_STARTED`` of ``resume`` only: the recovery table's move for the log's tail (a
    #: :class:`polyloop.recovery.ResumeMove` value, e.g. ``"execute_action_again"``, or
    #: ``"stop_state_unknown"`` when a call in doubt may not be repeated). Added by design 0050.
    resume_move: str | None = None
    #: ``RUN_STARTED`` of ``resume`` only: the announced, never settled intent the move is
    #: about (made again, or refused); ``None`` when the tail had none. Added by design 0050.
    intent_in_doubt: Intent | None = None
    #: ``STEP_COMPLETED`` only: the step's recorded model-call result (the reply with its
    #: ``finish_reason`` and ``usage``, or the failure); ``None`` for a step built without one
    #: (an older emitter). Added by design 0050.
    model_result: ModelCallResult | None = None
    #: ``RUN_PARKED`` only: the ask the run waits on (design 0037).
    ask: UserAsked | None = None
    #: ``STEP_COMPLETED`` only: the call this invocation sent to the model for the step (its
    #: messages); ``None`` when the result was taken from the log on resume. Added by design
    #: 0062.
    model_call: ModelCall | None = None
    #: ``STEP_COMPLETED`` only: when the model call of ``model_call`` ran, as wall-clock
    #: ``time.time_ns()`` at its start and end; ``None`` when no call was made. Left out of
    #: equality: two runs making the same calls have equal events. Added by design 0062.
    model_call_ns: tuple[int, int] | None = field(default=None, compare=False)
    #: ``STEP_COMPLETED`` only: when the step's action was executed, as ``model_call_ns``;
    #: ``None`` when none was. Added by design 0062.
    action_ns: tuple[int, int] | None = field(default=None, compare=False)

    def __reduce__(self) -> tuple[type[Event], tuple[object, ...]]:
        # ``injection_entry_ids`` is a read-only view, which cannot be pickled or deep-copied;
        # a sink may hand events to another process.
        return (
            Event,
            (
                self.kind,
                self.run_id,
                self.step_idx,
                self.resumed,
                dict(self.injection_entry_ids),
                self.step,
                self.result,
                dict(self.parameter_snapshot),
                self.resume_move,
                self.intent_in_doubt,
                self.model_result,
                self.ask,
                self.model_call,
                self.model_call_ns,
                self.action_ns,
            ),
        )


# ---------------------------------------------------------------------------
# The five seams
# ---------------------------------------------------------------------------


@runtime_checkable
class ModelClient(Protocol):
    """Calls a model. Attached to the definition.

    No retries, back-off or rate limits appear here: those belong to the gateway layer below.
    A failure is an exception, never a normal reply with empty content — the library must be
    able to tell an infrastructure failure from a model that really said nothing.
    """

    async def call(self, call: ModelCall) -> ModelReply:
        """Answer one model call with the model's reply.

        The loop makes one call per step and awaits it before doing anything else in that run:
        the calls of one run never overlap, while runs that share a client may call it
        concurrently. A resumed run whose model call may be replayed calls again with the same
        ``call.result_id``, so a client that forwards it lets its backend recognise the repeat.
        ``call.messages``, ``call.binding`` and ``call.tools`` are shared with later calls of
        the run: read them, never change them.

        Raises any :class:`Exception` when no reply was obtained (connection refused, timeout,
        HTTP error, malformed body). The loop records ``"<exception type>: <message>"`` as the
        call's failure and stops the run with ``llm_error``; it never retries.

        Cancellation passes through: when the awaiting task is cancelled, let
        :class:`asyncio.CancelledError` propagate (after giving back what the call holds),
        never catch it to return or raise something else — the loop relies on it to record the
        run as ``cancelled``. The contract kit checks this.
        """
        ...

    def parameters(self) -> Mapping[str, str]:
        """Report this client's reproducibility parameters (model id, sampling, endpoint).

        Synchronous and free of I/O, so a snapshot can be taken right after assembly and does
        not depend on whether the network is up. Never include secrets.
        """
        ...


@runtime_checkable
class DecisionParser(Protocol):
    """Reads a model reply into a decision. Attached to the definition.

    ``parse`` is synchronous pure computation: it must not do I/O, because resume re-parses an
    interrupted step's recorded reply. It must not raise: for any input it returns a
    :class:`ParsedReply`, using :class:`InvalidDecision` when the reply cannot be read. If it
    raises anyway the library lets the exception propagate rather than invent a stop reason.
    """

    def parse(self, reply: ModelReply) -> ParsedReply:
        """Read ``reply`` into a decision, with the text the step puts into history.

        Returns for every input, however broken (empty, huge, control characters, half a code
        fence, lone surrogates): a reply that cannot be read gives :class:`InvalidDecision`,
        whose explanation is shown to the model as the step's observation. Deterministic: the
        same reply parses to an equal result every time, because resume parses a recorded reply
        again — and refuses to settle an interrupted action whose reply no longer parses into
        an action.

        Raises nothing. An exception is treated as a bug of the parser: it propagates out of
        ``run``/``resume`` and the run's log stays unfinished, with no stop reason invented.
        """
        ...

    def parameters(self) -> Mapping[str, str]:
        """Synchronous, no I/O, string values only."""
        ...


@runtime_checkable
class ActionExecutor(Protocol):
    """Executes actions. Attached to the request, because it differs per run.

    An action that fails on its own terms (code raises, a command exits non-zero) is
    ``EXECUTED`` with the error as its observation, so the model can correct itself.
    ``ENV_ERROR`` (returned or raised) means the environment can no longer serve the run.
    """

    async def execute(self, action: Action) -> ActionOutcome:
        """Carry out one action and report what happened.

        The loop writes the action's intent first, then awaits ``execute``, then records the
        outcome; the actions of one run never overlap. A tool call reaches ``execute`` only
        after the request's registry accepted its name and arguments. After a crash between
        the intent and the recorded step, resume calls ``execute`` again for the same step only
        when the action's replay policy is ``SAFE``; a ``NEVER`` action is not repeated.

        Returns an :class:`~polyloop.types.ActionOutcome`: ``EXECUTED`` when the action ran
        (also when it failed on its own terms), ``ENV_ERROR`` when the environment can no
        longer serve the run, which stops it with ``env_error``. Set
        ``observation_truncated_chars`` to the number of characters cut from the observation,
        and ``env_reported_completion`` only when the environment says the task is done.

        Raises any :class:`Exception` when the environment failed (a dead session, a lost
        connection; :class:`polyloop.errors.EnvironmentFailure` says so explicitly): the loop
        records ``ENV_ERROR`` with the definition's ``env_failed`` text and stops the run.
        Returning anything but an ``ActionOutcome`` is a bug: the loop raises
        :class:`polyloop.errors.PolyLoopError`.

        Cancellation passes through: when the awaiting task is cancelled, stop the action where
        it can be stopped and let :class:`asyncio.CancelledError` propagate, never turning it
        into an outcome. The contract kit checks this.
        """
        ...

    def parameters(self) -> Mapping[str, str]:
        """Report reproducibility parameters, including whether the executor is stateful and
        which session it is: resuming on another session must be refused by the snapshot.
        Synchronous, no I/O."""
        ...


@runtime_checkable
class RunStore(Protocol):
    """Append-only storage of run logs. Attached to the definition.

    - Holds no "current run": the run_id travels in every record, so concurrent runs on one
      store never see each other's records.
    - Each write is durable before it returns, and durability is prefix-closed: once write k is
      acknowledged, writes 1..k-1 of that run are durable too.
    - ``write_step_completed`` is atomic: readers see the action result and step record
      together or not at all.
    - A second ``RunStarted`` or ``RunFinished`` for a run_id is refused with
      :class:`polyloop.errors.RunAlreadyStartedError`, never overwritten.
    - Records read back equal the records written, in write order, and never alias them.
    - There is no existence query: ``read_log`` answers it.

    What every write guarantees: the record is durable when the call returns, and the store
    neither keeps nor changes the object it was handed in a way a caller could observe. The
    loop awaits each write before it does anything else in that run, so the writes of one run
    never overlap; writes of different runs may, on one store object, from many tasks. A
    write whose caller is cancelled stores the record whole or not at all, lets
    :class:`asyncio.CancelledError` propagate, and leaves the store usable: the loop writes
    ``RunFinished(cancelled)`` right after. A write that fails for any other reason raises
    :class:`polyloop.errors.StoreError` (or a subclass) whose message says whether the record
    may have been stored; the loop does not catch it, so the run stops with that error and can
    be resumed.
    """

    async def write_run_started(self, record: RunStarted) -> None:
        """Record the start of run ``record.run_id``: the first record of its log.

        Raises :class:`polyloop.errors.RunAlreadyStartedError` when the run already has a
        ``RunStarted`` — written through this or any other store object on the same storage —
        and leaves the stored one unchanged. When several writers race to start one run, the
        storage decides: exactly one succeeds, every other one gets that error.
        """
        ...

    async def write_intent(self, record: Intent) -> None:
        """Record that the loop is about to make a model call or execute an action.

        Written before the side effect it announces, so resume can tell "may have happened"
        from "never started": it must be durable before the call returns.

        Raises :class:`polyloop.errors.DuplicateRecordError` for a second intent of the same
        kind and ``result_id`` in the run (a replay never writes its intent again), keeping
        the log as it was.
        """
        ...

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        """Record the reply, or the failure, of a model call whose intent is written.

        Raises :class:`polyloop.errors.DuplicateRecordError` for a second result of the same
        ``result_id`` in the run, keeping the log as it was.
        """
        ...

    async def write_step_completed(self, record: StepCompleted) -> None:
        """Record a finished step: its action's result (``result_id`` and ``action_outcome``,
        both ``None`` when the step attempted no action) and its :class:`StepRecord`.

        Atomic: no reader, and no store reopened after a crash, ever sees the action's result
        without the step record or the other way round.

        Raises :class:`polyloop.errors.DuplicateRecordError` for a second ``StepCompleted`` of
        the same step index in the run, keeping the log as it was.
        """
        ...

    async def read_log(self, run_id: str) -> RunLog:
        """Read a whole log back.

        For a run_id never written, return ``RunLog()`` and do not raise: ``run`` relies on it
        to tell a fresh run from an existing one, and an exception used as flow control would
        make "storage unreachable" look like "new run" and start it over. Reading creates
        nothing: a run only read is still unknown.

        Every acknowledged write of the run is in the result, through whichever store object
        on the same storage it was made: a cache kept by this object must not hide a write
        made through another one. Each field holds its records in write order, in tuples
        (never a container the store goes on changing).

        Raises :class:`polyloop.errors.CorruptLogError` (naming the record) when what is stored
        for the run cannot be read back as its records, and
        :class:`polyloop.errors.StoreError` when the storage cannot be read at all.
        """
        ...

    async def write_run_finished(self, record: RunFinished) -> None:
        """Record how the run ended: the last record of its log.

        The loop also writes it while the run is being cancelled, shielded from the
        cancellation and bounded by the request's ``cancel_grace_seconds``: the write must be
        able to finish after the task that started it was cancelled.

        Raises :class:`polyloop.errors.RunAlreadyStartedError` (a
        :class:`~polyloop.errors.DuplicateRecordError`) when the run already has a
        ``RunFinished``, leaving the stored one unchanged.
        """
        ...

    def parameters(self) -> Mapping[str, str]:
        """Name the storage (kind, database, directory), for the run's parameter snapshot.

        Synchronous, no I/O, string values only, the same on every call. Never a secret: no
        password, token or URL userinfo, since the snapshot is stored in every run log.
        """
        ...


@runtime_checkable
class EventSink(Protocol):
    """Receives events. Attached to the definition.

    ``emit`` may raise: the library catches the failure, logs it to the ``polyloop`` logger,
    counts it in ``RunResult.event_delivery_failures`` and carries on. Events are an
    observation channel, not a control channel. A failure is never re-emitted as an event.
    """

    async def emit(self, event: Event) -> None:
        """Take one event; what the sink does with it never steers the run.

        Events of one run arrive one at a time, in the order they happen, each after the
        record it reports is durable (see :class:`EventKind`). Each delivery is bounded by the
        ``event_timeout_seconds`` of ``run``/``resume``: a delivery still running then is
        cancelled and counted as failed, and after three such timeouts in a row the sink is
        not called again for the rest of that invocation. Never change ``event``: other code
        may hold the same records.

        Raises any :class:`Exception` to report a failed delivery: it is logged and counted in
        ``RunResult.event_delivery_failures`` (except for ``RUN_FINISHED``, which comes after
        the result is written), never retried and never raised out of the run.

        Cancellation passes through: let :class:`asyncio.CancelledError` propagate, both when
        the run is cancelled and when a delivery runs out of time. The contract kit checks it.
        """
        ...

    def parameters(self) -> Mapping[str, str]:
        """Synchronous, no I/O, string values only."""
        ...


# ---------------------------------------------------------------------------
# Optional store capabilities (the seam grows; RunStore itself stays as the seeds fix it)
# ---------------------------------------------------------------------------


@runtime_checkable
class RunLease(Protocol):
    """The right to drive one run, held from :meth:`RunLeasing.acquire_run_lease` to release.

    A lease is a handle, never an implicit "current run" of the store: writes still carry their
    run_id in the record, and a store never infers one from a lease.
    """

    @property
    def run_id(self) -> str:
        """The run this lease is for."""
        ...

    async def release(self) -> None:
        """Give the lease back. Idempotent: releasing a released (or lost) lease does nothing.

        Once it returns, any store object on the same storage can take the lease at once.
        Must finish even when the calling task is being cancelled (the loop shields it, and
        raises the cancellation again once the lease is back), and must not raise for a lease
        whose holder session is already gone. A release that raises anyway is logged by the
        loop, never raised over the run's own result or error.
        """
        ...


@runtime_checkable
class RunLeasing(Protocol):
    """Optional RunStore capability: at most one holder of a run's lease at a time, anywhere.

    ``run`` and ``resume`` take the lease before they read the log and release it on every
    path. "Anywhere" means every store object on the same storage: in this process, in other
    processes and, for server stores, on other machines. The operating system or the server
    frees a lease when its holder dies (no TTL to wait out): a process killed with SIGKILL, or
    whose connection dropped, holds nothing. A child process forked or spawned by the holder
    (a tool, an executor) never keeps a lease alive after the holder died.

    A store without this capability keeps working: the loop then refuses a second driver of a
    run only on the same store object in the same process, and exclusivity across processes
    is the store's own business.
    """

    async def acquire_run_lease(self, run_id: str) -> RunLease:
        """Take the lease of ``run_id`` now, or raise at once.

        Raises :class:`polyloop.errors.RunLeaseHeldError` (naming the holder where it can) when
        any holder has it — also another store object of this process, and also this very
        object. Never waits; the loop implements bounded waiting by retrying. Taking a lease
        creates no run log. A failure to reach the storage raises
        :class:`polyloop.errors.StoreError`, never ``RunLeaseHeldError``: "cannot tell" must not
        read as "someone else drives it".

        The loop awaits it shielded from cancellation and gives back a lease granted after its
        own task was cancelled, so the call itself is not cancelled half-way by the loop.
        """
        ...

    async def run_lease_holder(self, run_id: str) -> LeaseHolder | None:
        """Who holds the lease of ``run_id`` now, or ``None`` when nobody does.

        Looks without taking: it never makes a concurrent :meth:`acquire_run_lease` fail. A
        lease held by a holder the store cannot describe is ``LeaseHolder()``, every field ``None``.
        The answer can be out of date as soon as it returns; it is for reports (``polyloop
        runs``), never for deciding who may drive. Raises :class:`polyloop.errors.StoreError`
        when the storage cannot be reached.
        """
        ...


@runtime_checkable
class RunListing(Protocol):
    """Optional RunStore capability: list the runs a store holds."""

    async def list_run_ids(self) -> tuple[str, ...]:
        """Every run_id with at least one record, in a stable order the store documents.

        Sees every run written through any store object on the same storage, each run_id
        once; a run that was only read (``read_log``) is not listed. Never blocks the event
        loop. Raises :class:`polyloop.errors.StoreError` when the storage cannot be listed, and
        :class:`polyloop.errors.CorruptLogError` (naming it) for an entry of the storage that
        is not a run log the store can read.
        """
        ...


@runtime_checkable
class StoreClosing(Protocol):
    """Optional RunStore capability: release the store's resources (files, threads, sessions).

    Both wait for writes in flight. After closing, the store must not be used; closing twice
    does nothing. ``close`` blocks and is for synchronous code; ``aclose`` never blocks the
    event loop.
    """

    def close(self) -> None:
        """Wait for the writes in flight, then release everything the store holds.

        Blocks the calling thread: never call it from a coroutine (use :meth:`aclose`). Every
        lease this object still holds is free when it returns. Calling it again does nothing.
        """
        ...

    async def aclose(self) -> None:
        """The same as :meth:`close`, waiting without blocking the event loop.

        Calling it again, or after ``close``, does nothing.
        """
        ...


@runtime_checkable
class UserAsking(Protocol):
    """Optional RunStore capability: the two records of a run that asks a person (design 0037).

    A gated run (a tool that ``requires_approval`` or ``asks_user``, or an approval policy on
    the request) is refused at start on a store without it; every other run never writes
    these records. Both writes follow every rule of the other writes (durable before they
    return, prefix durability, never aliasing), and ``read_log`` returns them in
    :attr:`RunLog.asks` and :attr:`RunLog.answers`, in write order.
    """

    async def write_user_asked(self, record: UserAsked) -> None:
        """Record that step ``record.step`` waits for a person, before any action intent of it.

        Raises :class:`polyloop.errors.DuplicateRecordError` for a second ``UserAsked`` of
        the same step in the run, keeping the log as it was.
        """
        ...

    async def write_user_answered(self, record: UserAnswered) -> None:
        """Record a person's decision on the ask of step ``record.step``.

        At most once per ask: raises :class:`polyloop.errors.DuplicateRecordError` for a second
        ``UserAnswered`` of the same step, keeping the first. When two deciders race past every
        other check, this refusal decides which one wins: the storage decides, atomically.
        """
        ...


def supports_user_asking(store: object) -> bool:
    """Whether ``store`` can hold the records of a run that asks a person (:class:`UserAsking`)."""
    return isinstance(store, UserAsking)


#: A record :meth:`RecordBatching.write_records` takes: any record of a run log.
BatchedRecord = (
    RunStarted | Intent | ModelCallResult | StepCompleted | RunFinished | UserAsked | UserAnswered
)


@runtime_checkable
class RecordBatching(Protocol):
    """Optional RunStore capability: several records of one run made durable by one write
    (design 0055).

    The loop hands a store records that follow each other with no side effect between them
    (a model call's result and the action intent after it; a step's ``StepCompleted`` and the
    next step's model intent) in one call, so a step costs two syncs instead of four. A store
    without it gets the same records one write each, as before.
    """

    async def write_records(self, records: Sequence[BatchedRecord]) -> None:
        """Make ``records``, all of one run, durable in order, as one write.

        The log afterwards is exactly the log that writing them one by one, in order, through
        the method of each record's kind would give (``read_log`` returns equal records, in the
        same order, never aliasing what was handed in), and the stored form of each record is
        the one its own write would store. Every rule of those writes holds for each record:
        a duplicate (against the log or earlier in ``records``), a second ``RunStarted`` or
        ``RunFinished`` is refused with the error its own write raises; ``UserAsked`` and
        ``UserAnswered`` only on a store that also implements :class:`UserAsking`. An empty
        sequence writes nothing.

        Whole or nothing when refused: if it raises, none of ``records`` is stored (the log is
        as it was), unless it raises a :class:`polyloop.errors.StoreError` whose message says
        the records may have been stored; then the log holds the records before the call and a
        prefix of ``records``. After a crash at any moment the same holds: the log is the one
        before the call plus a prefix of ``records`` (none, some or all), never a later record
        without every earlier one. Returns only when every record is durable; never blocks the
        event loop. Raises :class:`ValueError` (storing nothing) when the records are not all
        of one run.
        """
        ...


def supports_record_batching(store: object) -> bool:
    """Whether ``store`` can make several records durable in one write (:class:`RecordBatching`)."""
    return isinstance(store, RecordBatching)


@runtime_checkable
class RecordCopying(Protocol):
    """Optional RunStore capability: a fork's copy of another run's records written from their
    stored form, without encoding them again (design 0072).

    A fork at step K writes its ``RunStarted`` and thousands of the source's records under its
    own run id; encoding them again was most of a fork's cost on a durable store.
    """

    async def copy_records(
        self, started: RunStarted, source_run_id: str, records: Sequence[BatchedRecord]
    ) -> bool:
        """Write ``started`` and then ``records`` under ``started.run_id``, as one write, or
        nothing and return ``False``.

        ``records`` are the records that follow the source's ``RunStarted`` in its log, in
        the order the store holds them, as read back from this store (under
        ``source_run_id``). When the store holds them so (same kinds, same order, under that
        run id) it writes each one's stored form with only the run id changed and returns
        ``True``: the log afterwards is the one :meth:`RecordBatching.write_records` of
        ``started`` and the records under the new run id would give, with the same rules
        (a duplicate is refused, storing nothing) and the same guarantee after a crash (the
        log before the call plus a prefix of the records). Otherwise it writes nothing and
        returns ``False``: the caller writes the records itself.
        """
        ...


def supports_record_copying(store: object) -> bool:
    """Whether ``store`` can copy a run's records under another run id (:class:`RecordCopying`)."""
    return isinstance(store, RecordCopying)


@runtime_checkable
class PrefixReplaying(Protocol):
    """Optional ActionExecutor capability: its session is an isolated environment that starts
    empty, so a fork can bring it to step K by executing the prefix's recorded actions again
    in a new session (design 0072).

    Executing them again there repeats nothing outside the session, whatever their replay
    policy says about the world: that policy is about the session the source ran in. Only
    tool-less actions (the code the executor itself runs) are replayed; a tool call acts
    through a tool, on the world as it is, and is never repeated.
    """

    def can_replay_prefix(self) -> bool:
        """Whether the session is isolated and no action has run in it yet (started, fresh):
        executing a prefix's actions in it now reaches the state they left in the source's."""
        ...

    async def replay_action(self, action: Action) -> ActionOutcome:
        """Execute one of the prefix's recorded actions again, before the fork's own steps.

        Returns and raises what :meth:`ActionExecutor.execute` does; the fork refuses to
        start (writing nothing) unless every replayed action is ``EXECUTED``."""
        ...


def supports_prefix_replay(executor: object) -> bool:
    """Whether ``executor`` can bring a fresh session to a fork's step by replaying its prefix
    (:class:`PrefixReplaying`)."""
    return isinstance(executor, PrefixReplaying)
