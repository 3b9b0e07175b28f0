"""The governed loop: ``run``, and the steps both ``run`` and ``resume`` (``_resume``) drive.

One step makes exactly one model call. Inside a step every store write is awaited before the
next thing happens, and an intent is written before each side effect, so that ``resume`` can
tell from the log alone what happened (see :mod:`polyloop.recovery`). Records followed by
nothing but computation share the next durable write on a store that can batch
(:mod:`polyloop.session._writes`, design 0055).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from polyloop.asking import (
    RunParked,
    UserAnswered,
    UserAsked,
    Verdict,
)
from polyloop.errors import (
    ConfigurationError,
    PolyLoopError,
    RunAlreadyStartedError,
    RunWouldParkError,
    ToolCallRejected,
)
from polyloop.ports import (
    Action,
    Decision,
    Event,
    EventKind,
    FinalAnswer,
    InvalidDecision,
    ModelCall,
    RunLog,
    ToolCall,
)
from polyloop.recovery import (
    ActionTerms,
    action_result_id,
    action_terms,
    budget_stop,
    model_result_id,
    stop_after_step,
    trailing_parse_failures,
)
from polyloop.session._deciding import AskHandler, UserDecision, decided, require_user_asking
from polyloop.session._definition import AgentDefinition, RunRequest, merge_snapshots
from polyloop.session._events import EventChannel
from polyloop.session._gates import (
    DEFAULT_REJECTED_TEMPLATE,
    REASON_TOKEN,
    ApprovalPolicy,
    Gates,
    now_iso,
)
from polyloop.session._lease import check_lease_wait, release_run_lease, take_run_lease
from polyloop.session._prompt import Prompt
from polyloop.session._writes import Writes
from polyloop.tools import canonical_arguments
from polyloop.types import (
    CURRENT_SCHEMA_VERSION,
    ActionOutcome,
    ActionStatus,
    CallNotExecuted,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    RunFinished,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
    StopReason,
)

__all__ = [
    "DEFAULT_EVENT_TIMEOUT_SECONDS",
    "Asking",
    "Clock",
    "Driver",
    "Parked",
    "check_options",
    "entry_ids",
    "leased",
    "refuse_gated",
    "run",
    "run_or_park",
    "run_snapshot",
    "start",
]

logger = logging.getLogger("polyloop")

#: Default bound on one event delivery (see :class:`EventChannel`).
DEFAULT_EVENT_TIMEOUT_SECONDS = 1.0

Clock = Callable[[], float]


def started_at(clock: Clock) -> str:
    """A run's ``RunStarted.started_at``: the clock's own UTC time when it has one (a method
    ``utc_iso()``, as the contract kit's ``TickingClock``, so a test's log does not depend on the
    hour it ran at, design 0061), else the real UTC time to the second."""
    utc_iso = getattr(clock, "utc_iso", None)
    return utc_iso() if callable(utc_iso) else now_iso()


def run_snapshot(
    definition: AgentDefinition, request: RunRequest, gates: Gates | None = None
) -> Mapping[str, str]:
    """The parameter snapshot a run records in ``RunStarted``: definition and request merged,
    and, for a gated run only, its gating keys under ``approval.`` (design 0037)."""
    if gates is None:
        return merge_snapshots(
            ("", definition.parameter_snapshot()), ("", request.parameter_snapshot())
        )
    return merge_snapshots(
        ("", definition.parameter_snapshot()),
        ("", request.parameter_snapshot()),
        ("approval.", gates.parameters()),
    )


@dataclass(frozen=True, slots=True)
class Asking:
    """How one invocation asks a person: its gates (``None``: ungated) and its in-process
    handler (``None``: park)."""

    gates: Gates | None = None
    ask_now: AskHandler | None = None

    @classmethod
    def of(
        cls,
        request: RunRequest,
        definition: AgentDefinition,
        approval_policy: ApprovalPolicy | None,
        rejected_template: str,
        ask_now: AskHandler | None,
    ) -> Asking:
        """Checked options of ``run_or_park``/``resume_or_park``; refuses a gated run on a
        store without :class:`~polyloop.ports.UserAsking`."""
        if ask_now is not None and not callable(ask_now):
            raise ConfigurationError(
                "ask_now must be an async callable (UserAsked) -> UserDecision | None."
            )
        gates = Gates.of(request.tools, approval_policy, rejected_template)
        if gates is not None:
            require_user_asking(definition.store, f"Run {request.run_id!r}")
        return cls(gates, ask_now)


_UNGATED = Asking()


def _usage_of(error: Exception) -> Mapping[str, int] | None:
    """What a failed call still cost, when the error says (design 0065: a retrying client's
    error carries ``usage``); a malformed ``usage`` is ignored, never a reason to fail the run."""
    usage = getattr(error, "usage", None)
    if not isinstance(usage, Mapping) or not usage:
        return None
    if all(
        isinstance(key, str) and type(count) is int and count >= 0 for key, count in usage.items()
    ):
        return dict(usage)
    return None


def check_options(clock: Clock, event_timeout_seconds: float, lease_wait_seconds: float) -> None:
    check_lease_wait(lease_wait_seconds)
    if not callable(clock):
        raise ConfigurationError("clock must be a zero-argument callable returning seconds.")
    if (
        isinstance(event_timeout_seconds, bool)
        or not isinstance(event_timeout_seconds, int | float)
        or not math.isfinite(event_timeout_seconds)
        or event_timeout_seconds <= 0
    ):
        raise ConfigurationError(
            f"event_timeout_seconds must be a finite number > 0, got {event_timeout_seconds!r}."
        )


@dataclass(frozen=True, slots=True)
class Parked:
    """What a step returns instead of a stop reason when it waits for a person."""

    ask: UserAsked


#: What a step ends with: a stop reason, ``None`` (the run goes on), or parking.
StepEnd = StopReason | Parked | None


@dataclass(slots=True)
class _Head:
    """The fields of a step record known once the model reply is in."""

    step_idx: int
    raw_output: str
    content_chars: int
    thinking_chars: int
    prompt_chars: int
    call_id: str | None
    #: The reply's calls after the one the step may execute (``ParsedReply.calls_not_executed``).
    calls_not_executed: tuple[CallNotExecuted, ...] = ()

    def record(
        self,
        *,
        action: str | None,
        parse_ok: bool,
        parse_error: str | None,
        observation: str,
        observation_is_synthetic: bool,
        step_wall_ms: int,
        observation_truncated_chars: int = 0,
        tool_name: str | None = None,
        tool_arguments: str | None = None,
        action_status: ActionStatus | None = None,
        env_reported_completion: bool = False,
    ) -> StepRecord:
        # Positional: this runs once per step and keyword parsing of 18 fields is not free.
        return StepRecord(
            self.step_idx,
            self.raw_output,
            self.content_chars,
            self.thinking_chars,
            action,
            parse_ok,
            parse_error,
            observation,
            observation_is_synthetic,
            observation_truncated_chars,
            self.prompt_chars,
            self.call_id,
            step_wall_ms,
            tool_name,
            tool_arguments,
            action_status,
            env_reported_completion,
            CURRENT_SCHEMA_VERSION,
            self.calls_not_executed,
        )


class Driver:
    """The state of one invocation (``run`` or ``resume``) of one run."""

    def __init__(
        self,
        definition: AgentDefinition,
        request: RunRequest,
        clock: Clock,
        event_timeout_seconds: float,
        asking: Asking = _UNGATED,
    ) -> None:
        self.definition = definition
        self.request = request
        self.run_id = request.run_id
        self.store = definition.store
        self.clock = clock
        self.events = EventChannel(definition.event_sink, request.run_id, event_timeout_seconds)
        self.writes = Writes(definition.store, self.events)
        self.prompt = Prompt(request)
        self.steps: list[StepRecord] = []
        self.actions_executed = 0
        self.parse_failures_in_a_row = 0
        self.final_answer: str | None = None
        self.finish_written = False
        #: The call ``resume`` is making again for the step it settles (recorded with it).
        self.replaying: IntentKind | None = None
        #: The step's model call made by this invocation and when it and the action ran, for
        #: the ``STEP_COMPLETED`` event (design 0062); reset when the step completes.
        self.sent_call: ModelCall | None = None
        self.call_ns: tuple[int, int] | None = None
        self.action_ns: tuple[int, int] | None = None
        #: ``None`` for an ungated request: the loop then never asks (design 0037).
        self.gates = asking.gates
        self.ask_now = asking.ask_now

    # -- rebuilding from a log ------------------------------------------------------------

    def rebuild(self, log: RunLog) -> None:
        """Restore the recorded steps and the counters derived from them."""
        for completed in log.steps:
            step = completed.step
            self.steps.append(step)
            if step.action_status is ActionStatus.EXECUTED:
                self.actions_executed += 1
        self.parse_failures_in_a_row = trailing_parse_failures(self.steps)

    def rebuild_history(self) -> None:
        """Restore the prompt history; only needed when the run goes on."""
        for step in self.steps:
            self.prompt.add_step(step)

    # -- the loop ---------------------------------------------------------------------------

    async def drive(self, tail: Awaitable[StepEnd] | None = None) -> RunResult | RunParked:
        """Run steps until a stop reason; record and return the result.

        ``tail``: how a resumed run settles the tail of its log first (``_resume.settle``, the
        one place that acts on the recovery table), awaited inside the cancellation guard.
        """
        try:
            reason = None if tail is None else await tail
            while reason is None:
                reason = await self.step(len(self.steps))
            if type(reason) is Parked:
                return await self.park(reason.ask)
            assert isinstance(reason, StopReason)
            return await self.finish(reason)
        except asyncio.CancelledError:
            await self.record_cancelled()
            raise
        except Exception:
            # A record held when the loop failed (a parser or a clock raising) is written as
            # its own write would have been, before the failure propagates.
            await self.writes.flush()
            raise

    async def step(self, k: int) -> StepEnd:
        """Step ``k`` from its start: budgets, prompt, model intent, call, then the reply."""
        budget = self.request.budget
        started = self.clock()
        stop = budget_stop(k, self.actions_executed, budget.max_steps, budget.max_actions)
        if stop is not None:
            return stop
        prompt_chars = self.prompt.chars
        if prompt_chars > budget.max_prompt_chars:
            return StopReason.CONTEXT_OVERFLOW
        await self.writes.announce(Event(EventKind.STEP_STARTED, self.run_id, k))
        result_id = model_result_id(k)
        await self.writes.write(
            Intent(
                self.run_id, IntentKind.MODEL_CALL, k, result_id, self.request.model_replay_policy
            )
        )
        result = await self.model_result(k, result_id)
        return await self.after_result(k, result, prompt_chars, started)

    async def model_result(self, k: int, result_id: str) -> ModelCallResult:
        """Call the model for step ``k`` (its intent is written) and record what came back."""
        call = self.prompt.model_call(k, self.run_id, result_id, self.request.model_binding)
        began = time.time_ns()
        result = await self.call_model(call)
        self.sent_call, self.call_ns = call, (began, time.time_ns())
        await self.writes.hold(result)
        return result

    async def after_result(
        self, k: int, result: ModelCallResult, prompt_chars: int, started: float
    ) -> StepEnd:
        """Record step ``k`` from its model result: a failed call, or the parsed decision."""
        if result.reply is None:
            step = StepRecord(
                step_idx=k,
                raw_output="",
                content_chars=0,
                thinking_chars=0,
                action=None,
                parse_ok=False,
                parse_error=None,
                observation=self.definition.synthetic_observations.model_call_failed,
                observation_is_synthetic=True,
                observation_truncated_chars=0,
                prompt_chars=prompt_chars,
                call_id=None,
                step_wall_ms=self.elapsed_ms(started),
            )
            await self.complete(step, None, None, result)
            return self.stop_reason(step, completes_run=False)
        decision, head = self.interpret(k, result.reply, prompt_chars)
        if isinstance(decision, InvalidDecision):
            self.parse_failures_in_a_row += 1
            step = head.record(
                action=None,
                parse_ok=False,
                parse_error=decision.explanation,
                observation=decision.explanation,
                observation_is_synthetic=True,
                step_wall_ms=self.elapsed_ms(started),
            )
            await self.complete(step, None, None, result)
            return self.stop_reason(step, completes_run=False)

        self.parse_failures_in_a_row = 0
        if isinstance(decision, FinalAnswer):
            step = head.record(
                action=None,
                parse_ok=True,
                parse_error=None,
                observation="",
                observation_is_synthetic=False,
                step_wall_ms=self.elapsed_ms(started),
            )
            self.final_answer = decision.text
            await self.complete(step, None, None, result)
            return self.stop_reason(step, completes_run=False)
        return await self.act(k, decision, head, started, result)

    def interpret(self, k: int, reply: ModelReply, prompt_chars: int) -> tuple[Decision, _Head]:
        """Parse ``reply``; the decision and the step fields known from the reply alone."""
        parsed = self.definition.decision_parser.parse(reply)
        head = _Head(
            k,
            parsed.history_text,
            len(reply.content),
            len(reply.thinking),
            prompt_chars,
            reply.call_id,
            parsed.calls_not_executed,
        )
        return parsed.decision, head

    async def act(
        self, k: int, action: Action, head: _Head, started: float, result: ModelCallResult
    ) -> StepEnd:
        """An action of step ``k``: rejected by the registry, or announced and executed."""
        call = action.tool_call
        if call is not None:
            try:
                self.request.tools.validate(call)
            except ToolCallRejected as rejected:
                logger.debug("polyloop: run %r step %d: %s", self.run_id, k, rejected)
                step = head.record(
                    action=action.text,
                    parse_ok=True,
                    parse_error=None,
                    observation=self.definition.synthetic_observations.action_rejected,
                    observation_is_synthetic=True,
                    step_wall_ms=self.elapsed_ms(started),
                    tool_name=call.name,
                    tool_arguments=canonical_arguments(call.arguments),
                    action_status=ActionStatus.NOT_EXECUTED,
                )
                await self.complete(step, None, None, result)
                return self.stop_reason(step, completes_run=False)
        terms = self.terms_of(call)
        assert terms is not None  # validate() accepted the name
        spec = None if call is None else self.request.tools.spec_for(call.name)
        gates = self.gates
        if gates is not None:
            kind = gates.kind_for(action, spec)
            if kind is not None:
                asked = gates.asked(self.run_id, k, kind, action, spec)
                await self.writes.write(asked)
                return await self.await_decision(k, action, head, started, asked, result)
        await self.writes.write(
            Intent(self.run_id, IntentKind.ACTION, k, action_result_id(k), terms.replay_policy)
        )
        return await self.execute_announced(k, action, head, started, terms.completes_run, result)

    def terms_of(self, call: ToolCall | None) -> ActionTerms | None:
        """The terms the action calling ``call`` is announced under (``None``: its tool is not
        in the run's registry)."""
        return action_terms(None if call is None else call.name, self.request.tools.spec_for)

    # -- asking a person (design 0037) --------------------------------------------------

    async def await_decision(
        self,
        k: int,
        action: Action,
        head: _Head,
        started: float,
        asked: UserAsked,
        result: ModelCallResult,
    ) -> StepEnd:
        """Ask in-process (``ask_now``) or park; a decision given here is recorded and carried
        out at once."""
        decision = None if self.ask_now is None else await self.ask_now(asked)
        if decision is None:
            return Parked(asked)
        if not isinstance(decision, UserDecision):
            raise ConfigurationError(
                f"Run {self.run_id!r}: ask_now returned {type(decision).__name__}; return a "
                "UserDecision (UserDecision.approve(), .edit(...), .reject(...), .answer(...)) "
                "or None to park the run."
            )
        answered = decided(asked, decision, self.request.tools)
        await self.writes.write(answered)
        return await self.carry_out(k, action, head, started, answered, result)

    async def carry_out(
        self,
        k: int,
        action: Action,
        head: _Head,
        started: float,
        answered: UserAnswered,
        result: ModelCallResult,
    ) -> StepEnd:
        """Step ``k`` by its recorded decision: the approved (or edited) action announced and
        executed, or the step of a rejection or of the user's answer."""
        verdict = answered.verdict
        call = action.tool_call
        if verdict is Verdict.APPROVE or verdict is Verdict.EDIT:
            action = edited(action, answered)
            call = action.tool_call
            terms = self.terms_of(call)
            assert terms is not None  # act() validated the asked tool; resume refuses a stale ask
            await self.writes.write(
                Intent(self.run_id, IntentKind.ACTION, k, action_result_id(k), terms.replay_policy)
            )
            return await self.execute_announced(
                k, action, head, started, terms.completes_run, result
            )
        if verdict is Verdict.REJECT:
            assert answered.reason is not None
            assert self.gates is not None
            observation = self.gates.rejected_template.replace(REASON_TOKEN, answered.reason)
            synthetic, status = True, ActionStatus.NOT_EXECUTED
        else:
            assert answered.answer is not None
            observation, synthetic, status = answered.answer, False, None
        step = head.record(
            action=action.text,
            parse_ok=True,
            parse_error=None,
            observation=observation,
            observation_is_synthetic=synthetic,
            step_wall_ms=self.elapsed_ms(started),
            tool_name=None if call is None else call.name,
            tool_arguments=None if call is None else canonical_arguments(call.arguments),
            action_status=status,
        )
        await self.complete(step, None, None, result)
        return self.stop_reason(step, completes_run=False)

    async def park(self, ask: UserAsked) -> RunParked:
        """The run waits for a person: nothing more is written; the lease goes back when the
        invocation returns."""
        parked = RunParked(self.run_id, len(self.steps), ask)
        await self.events.emit(Event(EventKind.RUN_PARKED, self.run_id, len(self.steps), ask=ask))
        return parked

    async def execute_announced(
        self,
        k: int,
        action: Action,
        head: _Head,
        started: float,
        completes_run: bool,
        result: ModelCallResult,
    ) -> StepEnd:
        """Execute the action whose intent is written and record step ``k`` with its outcome."""
        began = time.time_ns()
        outcome = await self.execute(action)
        self.action_ns = (began, time.time_ns())
        call = action.tool_call
        step = head.record(
            action=action.text,
            parse_ok=True,
            parse_error=None,
            observation=outcome.observation,
            observation_is_synthetic=outcome.observation_is_synthetic,
            observation_truncated_chars=outcome.observation_truncated_chars,
            step_wall_ms=self.elapsed_ms(started),
            tool_name=None if call is None else call.name,
            tool_arguments=None if call is None else canonical_arguments(call.arguments),
            action_status=outcome.status,
            env_reported_completion=outcome.env_reported_completion,
        )
        if outcome.status is ActionStatus.EXECUTED:
            self.actions_executed += 1
        await self.complete(step, action_result_id(k), outcome, result)
        return self.stop_reason(step, completes_run=completes_run)

    async def call_model(self, call: ModelCall) -> ModelCallResult:
        failure: str | None = None
        reply: ModelReply | None = None
        failure_usage: Mapping[str, int] | None = None
        try:
            returned: object = await self.definition.model_client.call(call)
        except Exception as error:  # a failing model call is recorded; cancellation passes
            failure = f"{type(error).__name__}: {error}"
            failure_usage = _usage_of(error)
        else:
            if isinstance(returned, ModelReply):
                reply = returned
            else:
                failure = (
                    f"TypeError: the model client returned {type(returned).__name__}, "
                    "not a ModelReply"
                )
        return ModelCallResult(self.run_id, call.result_id, reply, failure, failure_usage)

    async def execute(self, action: Action) -> ActionOutcome:
        try:
            outcome: object = await self.request.action_executor.execute(action)
        except Exception as error:  # the environment failed; cancellation passes
            logger.warning(
                "polyloop: run %r: action executor raised %s: %s",
                self.run_id,
                type(error).__name__,
                error,
            )
            return ActionOutcome(
                status=ActionStatus.ENV_ERROR,
                observation=self.definition.synthetic_observations.env_failed,
                observation_is_synthetic=True,
                env_reported_completion=False,
                observation_truncated_chars=0,
            )
        if not isinstance(outcome, ActionOutcome):
            raise PolyLoopError(
                f"Run {self.run_id!r}: the action executor returned {type(outcome).__name__}, "
                "not an ActionOutcome; fix the executor (raise on environment failure)."
            )
        return outcome

    def stop_reason(self, step: StepRecord, *, completes_run: bool) -> StopReason | None:
        return stop_after_step(
            step,
            completes_run=completes_run,
            consecutive_parse_failures=self.parse_failures_in_a_row,
            max_consecutive_parse_failures=self.request.budget.max_consecutive_parse_failures,
        )

    def elapsed_ms(self, started: float) -> int:
        return max(0, round((self.clock() - started) * 1000))

    async def complete(
        self,
        step: StepRecord,
        result_id: str | None,
        outcome: ActionOutcome | None,
        model_result: ModelCallResult,
    ) -> None:
        replayed, self.replaying = self.replaying, None
        call, call_ns, action_ns = self.sent_call, self.call_ns, self.action_ns
        self.sent_call = self.call_ns = self.action_ns = None
        await self.writes.hold(StepCompleted(self.run_id, result_id, outcome, step, replayed))
        self.steps.append(step)
        self.prompt.add_step(step)
        if step.calls_not_executed:
            await self.announce_calls_not_executed(step)
        await self.writes.announce(
            Event(
                EventKind.STEP_COMPLETED,
                self.run_id,
                step.step_idx,
                step=step,
                model_result=model_result,
                model_call=call,
                model_call_ns=call_ns,
                action_ns=action_ns,
            )
        )

    async def announce_calls_not_executed(self, step: StepRecord) -> None:
        """A log line and an event naming the reply's calls that step did not execute."""
        names = ", ".join(call.tool_name for call in step.calls_not_executed)
        logger.warning(
            "polyloop: run %r step %d: the reply carried %d more tool call(s) than the one a "
            "step executes; not executed: %s (the model is told so)",
            self.run_id,
            step.step_idx,
            len(step.calls_not_executed),
            names,
        )
        await self.writes.announce(
            Event(EventKind.CALLS_NOT_EXECUTED, self.run_id, step.step_idx, step=step)
        )

    # -- the end ----------------------------------------------------------------------------

    def result(self, reason: StopReason) -> RunResult:
        return RunResult(
            run_id=self.run_id,
            stop_reason=reason,
            final_answer=self.final_answer if reason is StopReason.AGENT_FINISHED else None,
            steps=tuple(self.steps),
            event_delivery_failures=self.events.failures,
        )

    async def finish(self, reason: StopReason) -> RunResult:
        # The result counts the failed deliveries of every event before it, so the events
        # waiting for a held step go out first: a RunFinished never shares a write.
        await self.writes.flush()
        result = self.result(reason)
        await self.writes.write(RunFinished(self.run_id, result))
        self.finish_written = True
        # Emitted after the record is written: its own failure is logged but cannot be counted.
        await self.events.emit(
            Event(EventKind.RUN_FINISHED, self.run_id, len(self.steps), result=result)
        )
        return result

    async def record_cancelled(self) -> None:
        """Write ``RunFinished(cancelled)``, shielded, within ``cancel_grace_seconds``."""
        if self.finish_written:
            return  # cancelled while announcing an already recorded end: that record stands
        grace = self.request.cancel_grace_seconds
        deadline = time.monotonic() + grace
        result = self.result(StopReason.CANCELLED)
        write = asyncio.ensure_future(self.writes.write(RunFinished(self.run_id, result)))
        try:
            async with asyncio.timeout(grace):
                await asyncio.shield(write)
        except TimeoutError:
            logger.error(
                "polyloop: run %r was cancelled and its 'cancelled' finish record could not be "
                "written within cancel_grace_seconds=%s; giving up (resume will see it unfinished)",
                self.run_id,
                grace,
            )
            return
        except asyncio.CancelledError:
            logger.error(
                "polyloop: run %r was cancelled again while writing its finish record; giving up",
                self.run_id,
            )
            return
        except Exception as error:
            logger.error(
                "polyloop: run %r was cancelled and writing its finish record failed: %s: %s",
                self.run_id,
                type(error).__name__,
                error,
            )
            return
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await self.events.emit(
                Event(EventKind.RUN_FINISHED, self.run_id, len(self.steps), result=result),
                within=remaining,
            )


async def run(
    definition: AgentDefinition,
    request: RunRequest,
    *,
    clock: Clock = time.monotonic,
    event_timeout_seconds: float = DEFAULT_EVENT_TIMEOUT_SECONDS,
    lease_wait_seconds: float = 0.0,
) -> RunResult:
    """Start run ``request.run_id`` and drive it until it stops.

    Takes the run's lease first and holds it until it returns or raises: while another driver
    holds it, raises :class:`RunLeaseHeldError` before reading, writing or calling any seam
    (after retrying for up to ``lease_wait_seconds``; 0, the default, refuses at once).
    Raises :class:`RunAlreadyStartedError` (writing nothing) when the store already holds a log
    for this run_id. ``clock`` measures ``step_wall_ms`` (seconds as float, monotonic); one
    with a ``utc_iso()`` method also dates ``RunStarted.started_at`` (else the real UTC time).
    ``event_timeout_seconds`` bounds each event delivery.
    """
    check_options(clock, event_timeout_seconds, lease_wait_seconds)
    refuse_gated(request, "run", "run_or_park")
    outcome = await leased(
        start, definition, request, clock, event_timeout_seconds, lease_wait_seconds, _UNGATED
    )
    assert type(outcome) is RunResult  # an ungated run never parks
    return outcome


def refuse_gated(request: RunRequest, entry: str, instead: str) -> None:
    """``run``/``resume`` drive only runs that cannot park (design 0037)."""
    if Gates.is_gated(request.tools, None):
        raise RunWouldParkError(
            f"Run {request.run_id!r}: the request gates actions (a tool requires_approval or "
            f"asks_user), so the run may wait for a person; "
            f"{entry}() returns only finished runs. Call {instead}(), which returns a RunResult "
            "or a RunParked. Nothing was read or written."
        )


async def run_or_park(
    definition: AgentDefinition,
    request: RunRequest,
    *,
    clock: Clock = time.monotonic,
    event_timeout_seconds: float = DEFAULT_EVENT_TIMEOUT_SECONDS,
    lease_wait_seconds: float = 0.0,
    approval_policy: ApprovalPolicy | None = None,
    rejected_template: str = DEFAULT_REJECTED_TEMPLATE,
    ask_now: AskHandler | None = None,
) -> RunResult | RunParked:
    """``run``, for a request that may gate actions: returns the :class:`RunResult` of a run
    that stopped, or a :class:`RunParked` when a gated action waits for a person (its
    ``UserAsked`` recorded, the lease given back, no seam waiting).

    ``approval_policy`` gates single calls (tool-less actions too) on top of the tools
    marked ``requires_approval``/``asks_user``; ``rejected_template`` is the observation of a
    rejected action (``{reason}`` is replaced by the person's reason). Both are recorded in
    the snapshot of a gated run (``approval.policy``, ``approval.rejected_template``).

    ``ask_now``, when given, is awaited with each ask as soon as it is recorded: a
    :class:`UserDecision` is recorded and carried out at once, ``None`` parks. Raises
    :class:`UnsupportedStoreError` before anything else when the request is gated and the
    store lacks :class:`~polyloop.ports.UserAsking`. An ungated request behaves exactly as
    with ``run``.
    """
    check_options(clock, event_timeout_seconds, lease_wait_seconds)
    asking = Asking.of(request, definition, approval_policy, rejected_template, ask_now)
    return await leased(
        start, definition, request, clock, event_timeout_seconds, lease_wait_seconds, asking
    )


Invocation = Callable[
    [AgentDefinition, RunRequest, Clock, float, Asking], Awaitable["RunResult | RunParked"]
]


async def leased(
    invocation: Invocation,
    definition: AgentDefinition,
    request: RunRequest,
    clock: Clock,
    event_timeout_seconds: float,
    lease_wait_seconds: float,
    asking: Asking,
) -> RunResult | RunParked:
    """Run ``invocation`` holding the run's lease, taken first and given back on every path."""
    lease = await take_run_lease(definition.store, request.run_id, lease_wait_seconds)
    try:
        return await invocation(definition, request, clock, event_timeout_seconds, asking)
    finally:
        await release_run_lease(lease)


async def start(
    definition: AgentDefinition,
    request: RunRequest,
    clock: Clock,
    event_timeout_seconds: float,
    asking: Asking,
    *,
    follows_run_id: str | None = None,
    queued_input: str | None = None,
) -> RunResult | RunParked:
    """Write ``RunStarted`` (with the follow-up fields, design 0052) and drive the new run."""
    snapshot = run_snapshot(definition, request, asking.gates)
    invocation = Driver(definition, request, clock, event_timeout_seconds, asking)
    existing = await definition.store.read_log(request.run_id)
    if existing != RunLog():
        raise RunAlreadyStartedError(
            f"Run {request.run_id!r} already has a log in this store; run() starts a run only "
            "once. Call resume() with the same definition and request to continue it, or use a "
            "new run_id."
        )
    await definition.store.write_run_started(
        RunStarted(
            request.run_id,
            snapshot,
            follows_run_id=follows_run_id,
            queued_input=queued_input,
            started_at=started_at(clock),
        )
    )
    await invocation.events.emit(
        Event(
            EventKind.RUN_STARTED,
            request.run_id,
            0,
            injection_entry_ids=entry_ids(request),
            parameter_snapshot=snapshot,
        )
    )
    return await invocation.drive()


def entry_ids(request: RunRequest) -> Mapping[str, tuple[str, ...]]:
    return {
        channel: tuple(entry.entry_id for entry in entries)
        for channel, entries in request.injections.items()
    }


def edited(action: Action, answered: UserAnswered) -> Action:
    """``action`` as approved: with the edited arguments of an ``EDIT``, else unchanged."""
    if answered.verdict is not Verdict.EDIT:
        return action
    call = action.tool_call
    assert call is not None  # validate_log holds it: only calls are edited
    assert answered.arguments_json is not None
    return Action(action.text, ToolCall(call.name, json.loads(answered.arguments_json)))
