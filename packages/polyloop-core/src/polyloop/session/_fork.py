"""``fork``: a new run that starts from step K of a recorded one, with another agent (design 0067).

The fork's log holds its own ``RunStarted`` (lineage and its own parameter snapshot), then the
source's records of steps ``0..K-1`` under the new run id, in the loop's write order, all in one
write; its own agent then drives step K onward. Nothing of the prefix is called, executed or
asked again. A fork whose copy a crash cut short is refused by ``resume`` and completed by
calling ``fork`` again with the same arguments (the source's records before K never change).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from polyloop.asking import RunParked, UserAnswered, UserAsked
from polyloop.errors import (
    ConfigurationError,
    CorruptLogError,
    PolyLoopError,
    RunAlreadyStartedError,
    RunNotFoundError,
)
from polyloop.ports import (
    Action,
    BatchedRecord,
    DecisionParser,
    Event,
    EventKind,
    PrefixReplaying,
    RecordBatching,
    RecordCopying,
    RunLog,
    RunStore,
)
from polyloop.recovery import (
    action_result_id,
    action_terms,
    model_result_id,
    snapshot_facts,
    stop_after_step,
    trailing_parse_failures,
    validate_log,
)
from polyloop.session._deciding import AskHandler
from polyloop.session._definition import AgentDefinition, RunRequest
from polyloop.session._follow_up import resumed_request
from polyloop.session._gates import DEFAULT_REJECTED_TEMPLATE, ApprovalPolicy
from polyloop.session._loop import (
    DEFAULT_EVENT_TIMEOUT_SECONDS,
    Asking,
    Clock,
    Driver,
    check_options,
    edited,
    entry_ids,
    leased,
    run_snapshot,
    started_at,
)
from polyloop.session._prompt import Prompt
from polyloop.session._writes import write_one
from polyloop.tools import canonical_arguments
from polyloop.types import (
    CURRENT_SCHEMA_VERSION,
    ActionOutcome,
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    RunResult,
    RunStarted,
    StepCompleted,
    StepRecord,
)

__all__ = [
    "SnapshotDifference",
    "fork",
    "fork_is_whole",
    "parameter_differences",
    "refuse_incomplete_fork",
]


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotDifference:
    """One parameter whose value differs between a fork and its source (``None``: absent)."""

    key: str
    source: str | None
    fork: str | None


def parameter_differences(
    source: Mapping[str, str], fork: Mapping[str, str]
) -> tuple[SnapshotDifference, ...]:
    """The parameters of a fork's snapshot that differ from its source's, sorted by key."""
    return tuple(
        SnapshotDifference(key, source.get(key), fork.get(key))
        for key in sorted(set(source) | set(fork))
        if source.get(key) != fork.get(key)
    )


def fork_is_whole(log: RunLog) -> bool:
    """Whether a log holds everything its fork copied (``True`` for a run that is no fork):
    the copy is one write whose last record is the ``StepCompleted`` of step K-1."""
    started = log.started
    if started is None or started.forked_at_step is None:
        return True
    return len(log.steps) >= started.forked_at_step


def refuse_incomplete_fork(log: RunLog, run_id: str) -> None:
    """Raise for a fork whose copy was cut short: continuing it would take the cut for a crash
    and call the model again for a step the source already took."""
    if fork_is_whole(log):
        return
    started = log.started
    assert started is not None
    raise PolyLoopError(
        f"Run {run_id!r} is a fork of run {started.forked_from_run_id!r} at step "
        f"{started.forked_at_step} whose copy of the source's records was cut short (a crash "
        "while it was created); it cannot be resumed. Call fork() again with the same "
        "arguments: it completes the copy and starts the fork's own steps."
    )


async def fork(
    definition: AgentDefinition,
    request: RunRequest,
    *,
    source_run_id: str,
    at_step: int,
    in_doubt_observation: str | None = None,
    replay_prefix: bool | None = None,
    clock: Clock = time.monotonic,
    event_timeout_seconds: float = DEFAULT_EVENT_TIMEOUT_SECONDS,
    lease_wait_seconds: float = 0.0,
    approval_policy: ApprovalPolicy | None = None,
    rejected_template: str = DEFAULT_REJECTED_TEMPLATE,
    ask_now: AskHandler | None = None,
) -> RunResult | RunParked:
    """Start run ``request.run_id`` as a fork of run ``source_run_id`` at step ``at_step``:
    the source's records of steps ``0..at_step-1`` are copied into the new log (the source is
    only read), then ``definition``'s agent drives step ``at_step`` onward, like
    :func:`run_or_park` (a gated fork may park; the prefix's asks keep their decisions).

    The fork records its own parameter snapshot, which may differ from the source's in model,
    binding, budget, templates or parser (:func:`parameter_differences` lists them); a change
    that contradicts the copied records (another replay policy of a tool) is refused before
    anything is written. The prefix's actions are not executed again: the fork's tools act on
    the world as it is now.

    ``replay_prefix`` decides the environment at ``at_step`` (design 0072): an executor that
    declares :class:`~polyloop.ports.PrefixReplaying` and whose session is fresh is brought
    there by executing the prefix's executed tool-less actions again in it (``None``, the
    default: when it can; ``True``: required, else :class:`ConfigurationError`; ``False``:
    never). Tool calls are never repeated. The fork's ``RunStarted`` says which
    (``fork_replayed_prefix``); a replayed action that is not ``EXECUTED`` again refuses the
    fork with nothing written.

    When the source's step ``at_step - 1`` announced an action that never settled (a crash
    mid-action), the fork is refused unless ``in_doubt_observation`` is given: that step is then
    recorded ``not_executed`` with this text as its observation, and the fork's ``RunStarted``
    says ``fork_left_in_doubt``.

    Raises :class:`RunNotFoundError` for a source without a log, :class:`CorruptLogError` for a
    corrupt source, :class:`ConfigurationError` for a step the source cannot be forked at
    (saying which steps it can), :class:`RunAlreadyStartedError` when ``request.run_id`` has a
    log (unless it is this very fork, cut short while it was created: the copy is completed),
    and everything :func:`run_or_park` raises. A fork that stops half-way is continued with
    :func:`resume` / :func:`resume_or_park`, like any run.
    """
    check_options(clock, event_timeout_seconds, lease_wait_seconds)
    if not isinstance(source_run_id, str) or not source_run_id:
        raise ConfigurationError("fork(source_run_id=...) takes the id of the run to fork.")
    if source_run_id == request.run_id:
        raise ConfigurationError(
            f"fork was given run_id {request.run_id!r} for both the source and the fork; a fork "
            "is a new run: give the request a new run_id."
        )
    if type(at_step) is not int or at_step < 0:
        raise ConfigurationError(f"fork(at_step=...) takes a step index >= 0, got {at_step!r}.")
    if in_doubt_observation is not None and not isinstance(in_doubt_observation, str):
        raise ConfigurationError("fork(in_doubt_observation=...) takes a string or None.")
    if replay_prefix is not None and type(replay_prefix) is not bool:
        raise ConfigurationError("fork(replay_prefix=...) takes True, False or None.")
    asking = Asking.of(request, definition, approval_policy, rejected_template, ask_now)
    begin = functools.partial(
        _create,
        source_run_id=source_run_id,
        at_step=at_step,
        in_doubt_observation=in_doubt_observation,
        replay_prefix=replay_prefix,
    )
    return await leased(
        begin, definition, request, clock, event_timeout_seconds, lease_wait_seconds, asking
    )


async def _create(
    definition: AgentDefinition,
    request: RunRequest,
    clock: Clock,
    event_timeout_seconds: float,
    asking: Asking,
    *,
    source_run_id: str,
    at_step: int,
    in_doubt_observation: str | None,
    replay_prefix: bool | None,
) -> RunResult | RunParked:
    store = definition.store
    run_id = request.run_id
    source = await store.read_log(source_run_id)
    if source.started is None:
        raise RunNotFoundError(
            f"Run {source_run_id!r} has no RunStarted record in this store, so it cannot be "
            "forked; check the run id and the store."
        )
    validate_log(source, source_run_id)
    snapshot = run_snapshot(definition, request, asking.gates)
    in_doubt = _in_doubt_step(source, source_run_id, at_step, in_doubt_observation)
    replaying = _replaying(request, source_run_id, replay_prefix)
    existing = await store.read_log(run_id)
    # A fork cut short by a crash is completed with the records it began with: its start time too.
    began = existing.started.started_at if existing.started is not None else None
    started = RunStarted(
        run_id,
        snapshot,
        follows_run_id=source.started.follows_run_id,
        queued_input=source.started.queued_input,
        forked_from_run_id=source_run_id,
        forked_at_step=at_step,
        fork_left_in_doubt=in_doubt,
        started_at=began if began is not None else started_at(clock),
        fork_replayed_prefix=replaying,
    )
    forked_request = await resumed_request(store, request, started)
    if (
        not in_doubt
        and existing == RunLog()
        and not _rules_differ(source.started.parameter_snapshot, snapshot)
    ):
        # The common fork: the source's validated records, unchanged but for the run id, on an
        # empty log. A store that can copies their stored form (design 0072).
        prefix = _copied(source, at_step, in_doubt=False)
        # Under the source's run id: only its steps are read from here on (rebuild, the end).
        log = log_of([started, *prefix])
        _refuse_ended_prefix(log, forked_request, source_run_id, at_step)
        if replaying:
            await _replay(request, source, source_run_id, at_step)
        if not (
            isinstance(store, RecordCopying)
            and await store.copy_records(started, source_run_id, prefix)
        ):
            await _write_all(store, [started, *(_moved(record, run_id) for record in prefix)])
    else:
        log = await _checked_write(
            definition,
            forked_request,
            started,
            source,
            existing,
            source_run_id=source_run_id,
            at_step=at_step,
            in_doubt_observation=in_doubt_observation if in_doubt else None,
            check=in_doubt or _rules_differ(source.started.parameter_snapshot, snapshot),
            replaying=replaying,
        )

    driver = Driver(definition, forked_request, clock, event_timeout_seconds, asking)
    driver.rebuild(log)
    driver.rebuild_history()
    await driver.events.emit(
        Event(
            EventKind.RUN_STARTED,
            run_id,
            at_step,
            injection_entry_ids=entry_ids(forked_request),
            parameter_snapshot=snapshot,
        )
    )
    return await driver.drive()


async def _checked_write(
    definition: AgentDefinition,
    forked_request: RunRequest,
    started: RunStarted,
    source: RunLog,
    existing: RunLog,
    *,
    source_run_id: str,
    at_step: int,
    in_doubt_observation: str | None,
    check: bool,
    replaying: bool,
) -> RunLog:
    """Write (or complete) a fork whose records are checked or built here: a step left in
    doubt, other rules than the source's, or a copy cut short. Returns the fork's log."""
    store = definition.store
    run_id = started.run_id
    in_doubt = in_doubt_observation is not None
    records: list[BatchedRecord] = [
        started,
        *(_moved(record, run_id) for record in _copied(source, at_step, in_doubt=in_doubt)),
    ]
    if in_doubt_observation is not None:
        records.append(
            _unsettled_step(
                definition.decision_parser,
                forked_request,
                source,
                records,
                at_step - 1,
                in_doubt_observation,
            )
        )
    log = log_of(records)
    try:
        if check:
            validate_log(log, run_id)
    except CorruptLogError as error:
        raise ConfigurationError(
            f"Run {run_id!r} cannot be forked from run {source_run_id!r} at step {at_step} under "
            "these parameters: the copied records contradict them. A fork may change the "
            "model, its binding, the budget, templates and the parser, not what the prefix's "
            f"records are bound to (a tool's replay policy, the model replay policy). {error}"
        ) from None
    _refuse_ended_prefix(log, forked_request, source_run_id, at_step)
    if replaying:
        await _replay(forked_request, source, source_run_id, at_step)
    if existing == RunLog():
        await _write_all(store, records)
    else:
        await _complete(store, records, existing, run_id)
    return log


def _replaying(request: RunRequest, source_run_id: str, choice: bool | None) -> bool:
    """Whether the fork replays its prefix into the executor's session (``choice``: ``None``
    when the executor can, design 0072); raises when ``True`` and it cannot."""
    executor = request.action_executor
    if choice is False:
        return False
    if isinstance(executor, PrefixReplaying) and executor.can_replay_prefix():
        return True
    if choice:
        raise ConfigurationError(
            f"fork(replay_prefix=True) of run {source_run_id!r}: the executor "
            f"{type(executor).__name__} "
            + (
                "has a session in which actions already ran"
                if isinstance(executor, PrefixReplaying)
                else "does not declare that its sessions are isolated and fresh "
                "(polyloop.ports.PrefixReplaying)"
            )
            + ", so the prefix cannot be replayed into it. Give the fork a new, started "
            "executor of that kind, or fork with replay_prefix=None or False to go on against "
            "the environment as it is."
        )
    return False


async def _replay(request: RunRequest, source: RunLog, source_run_id: str, at_step: int) -> None:
    """Execute the prefix's executed tool-less actions again in the executor's fresh session,
    in step order, before anything of the fork is written."""
    executor = request.action_executor
    assert isinstance(executor, PrefixReplaying)
    for completed in source.steps[:at_step]:
        step = completed.step
        if step.action_status is not ActionStatus.EXECUTED or step.tool_name is not None:
            continue
        assert step.action is not None
        outcome = await executor.replay_action(Action(step.action, None))
        if outcome.status is not ActionStatus.EXECUTED:
            raise PolyLoopError(
                f"Forking run {source_run_id!r} at step {at_step}: replaying the action of its "
                f"step {step.step_idx} in the fresh session gave {outcome.status.value}, so the "
                "session is not in the state the prefix left; nothing was written. Give the fork a new executor and try again, "
                "or fork with replay_prefix=False."
            )


def _rules_differ(source: Mapping[str, str], fork: Mapping[str, str]) -> bool:
    """Whether the fork's snapshot says anything else than the source's about the rules its
    copied records follow. When not, the source's validated records are valid in the fork too
    (the budget's step and action limits only bound a finished log), and checking them again
    would be a third of a fork's cost."""
    before, after = snapshot_facts(source), snapshot_facts(fork)
    return dataclasses.replace(before, max_steps=None, max_actions=None) != dataclasses.replace(
        after, max_steps=None, max_actions=None
    )


def _in_doubt_step(
    source: RunLog, source_run_id: str, at_step: int, in_doubt_observation: str | None
) -> bool:
    """Whether the fork at ``at_step`` leaves the source's step ``at_step - 1`` in doubt;
    refuses a step the source cannot be forked at."""
    completed = len(source.steps)
    if at_step <= completed:
        return False
    settled = f"steps 0..{completed}" if completed else "step 0"
    unsettled = completed
    has_action_intent = any(
        intent.kind is IntentKind.ACTION and intent.call_index == unsettled
        for intent in source.intents
    )
    if at_step > completed + 1 or not has_action_intent:
        raise ConfigurationError(
            f"Run {source_run_id!r} cannot be forked at step {at_step}: it recorded "
            f"{completed} completed step(s), so a fork can start at {settled}"
            + ("" if at_step > completed + 1 else f"; step {unsettled} has not completed")
            + ". Fork earlier, or resume the source first."
        )
    if in_doubt_observation is None:
        policy = next(
            intent.replay_policy.value
            for intent in source.intents
            if intent.kind is IntentKind.ACTION and intent.call_index == unsettled
        )
        raise ConfigurationError(
            f"Run {source_run_id!r}, step {unsettled}: its action (replay policy {policy!r}) was "
            "announced and never settled, so whether it happened is unknown; a fork does not "
            "execute it again. Fork at an earlier step, or give in_doubt_observation (the "
            "observation the new agent reads for that step; the step is recorded not executed, "
            "in doubt) to fork here."
        )
    return True


def _copied(source: RunLog, at_step: int, *, in_doubt: bool) -> list[BatchedRecord]:
    """The source's records of steps ``0..at_step-1``, in write order (the unsettled step of an
    in-doubt fork without its ``StepCompleted``), still under the source's run id."""
    model_intents: dict[int, Intent] = {}
    action_intents: dict[int, Intent] = {}
    for intent in source.intents:
        if intent.call_index < at_step:
            kind = model_intents if intent.kind is IntentKind.MODEL_CALL else action_intents
            kind[intent.call_index] = intent
    results = {result.result_id: result for result in source.model_results}
    asks: dict[int, list[UserAsked]] = {}
    answers: dict[int, list[UserAnswered]] = {}
    for ask in source.asks:
        asks.setdefault(ask.step, []).append(ask)
    for answered in source.answers:
        answers.setdefault(answered.step, []).append(answered)
    out: list[BatchedRecord] = []
    for k in range(at_step):
        out.append(model_intents[k])
        out.append(results[model_result_id(k)])
        out.extend(asks.get(k, ()))
        out.extend(answers.get(k, ()))
        if k in action_intents:
            out.append(action_intents[k])
        if in_doubt and k == at_step - 1:
            break
        out.append(source.steps[k])
    return out


_MOVERS: dict[type, Callable[[Any, str], Any]] = {}


def _moved(record: BatchedRecord, run_id: str) -> BatchedRecord:
    """``record`` under ``run_id``, every other field the same object. Built without running
    ``__init__`` again, through the slots' own setters: the record was checked when it was
    made, and a fork copies thousands (``dataclasses.replace`` was most of a fork's cost)."""
    kind = type(record)
    mover = _MOVERS.get(kind)
    if mover is None:
        mover = _MOVERS[kind] = _mover(kind)
    moved: BatchedRecord = mover(record, run_id)
    return moved


def _mover(kind: type) -> Callable[[Any, str], Any]:
    slots = {field.name: getattr(kind, field.name) for field in dataclasses.fields(kind)}
    others = [(slot.__set__, slot.__get__) for name, slot in slots.items() if name != "run_id"]
    set_run_id = slots["run_id"].__set__
    new = object.__new__

    def move(record: Any, run_id: str) -> Any:
        copy: Any = new(kind)
        set_run_id(copy, run_id)
        for put, get in others:
            put(copy, get(record))
        return copy

    return move


def _unsettled_step(
    parser: DecisionParser,
    request: RunRequest,
    source: RunLog,
    records: Sequence[BatchedRecord],
    k: int,
    observation: str,
) -> StepCompleted:
    """The ``StepCompleted`` an in-doubt fork records for the source's unsettled step ``k``:
    the recorded reply's action, ``not_executed``, with the caller's observation."""
    wanted = model_result_id(k)
    result = next(r for r in records if type(r) is ModelCallResult and r.result_id == wanted)
    reply = result.reply
    assert reply is not None  # validate_log: an action intent follows a reply
    parsed = parser.parse(reply)
    decision = parsed.decision
    if not isinstance(decision, Action):
        raise PolyLoopError(
            f"Run {source.started.run_id if source.started else '?'!r}, step {k}: the recorded "
            f"reply once parsed into an action but this parser reads {type(decision).__name__}; "
            "fork at an earlier step, or with the source's parser."
        )
    answered = next((a for a in source.answers if a.step == k), None)
    action = decision if answered is None else edited(decision, answered)
    call = action.tool_call
    prompt = Prompt(request)
    for completed in source.steps[:k]:
        prompt.add_step(completed.step)
    step = StepRecord(
        k,
        parsed.history_text,
        len(reply.content),
        len(reply.thinking),
        action.text,
        True,
        None,
        observation,
        True,
        0,
        prompt.chars,
        reply.call_id,
        0,
        None if call is None else call.name,
        None if call is None else canonical_arguments(call.arguments),
        ActionStatus.NOT_EXECUTED,
        False,
        CURRENT_SCHEMA_VERSION,
        parsed.calls_not_executed,
    )
    outcome = ActionOutcome(ActionStatus.NOT_EXECUTED, observation, True, False, 0)
    run_id = records[0].run_id
    return StepCompleted(run_id, action_result_id(k), outcome, step)


def _refuse_ended_prefix(log: RunLog, request: RunRequest, source_run_id: str, at: int) -> None:
    """A step after one that ended the run is corrupt: the prefix must end with a step that
    lets the run go on, under the fork's own terms."""
    if at == 0:
        return
    steps = [completed.step for completed in log.steps]
    last = steps[-1]
    terms = action_terms(last.tool_name, request.tools.spec_for)
    completes = (
        terms is not None and terms.completes_run and last.action_status is ActionStatus.EXECUTED
    )
    reason = stop_after_step(
        last,
        completes_run=completes,
        consecutive_parse_failures=trailing_parse_failures(steps),
        max_consecutive_parse_failures=request.budget.max_consecutive_parse_failures,
    )
    if reason is not None:
        raise ConfigurationError(
            f"Run {source_run_id!r} cannot be forked at step {at}: its step {at - 1} ends a run "
            f"({reason.value}), so no step can follow it. Fork at step {at - 1} or earlier."
        )


async def _write_all(store: RunStore, records: Sequence[BatchedRecord]) -> None:
    if isinstance(store, RecordBatching):
        await store.write_records(records)
        return
    for record in records:
        await write_one(store, record)


async def _complete(
    store: RunStore, records: Sequence[BatchedRecord], existing: RunLog, run_id: str
) -> None:
    """Write the rest of a fork whose copy a crash cut short; refuse any other existing log."""
    held = _count(existing)
    if fork_is_whole(existing) or held >= len(records) or log_of(records[:held]) != existing:
        raise RunAlreadyStartedError(
            f"Run {run_id!r} already has a log in this store; fork() starts a run only once "
            "(it completes only its own copy cut short by a crash, with the same source, step "
            "and parameters). Resume the run, or fork under a new run_id."
        )
    await _write_all(store, records[held:])


def _count(log: RunLog) -> int:
    return (
        (log.started is not None)
        + len(log.intents)
        + len(log.model_results)
        + len(log.steps)
        + len(log.asks)
        + len(log.answers)
        + (log.finished is not None)
    )


def log_of(records: Sequence[BatchedRecord]) -> RunLog:
    """The :class:`RunLog` that reading ``records`` back gives (grouped by kind)."""
    started: RunStarted | None = None
    intents: list[Intent] = []
    results: list[ModelCallResult] = []
    steps: list[StepCompleted] = []
    asks: list[UserAsked] = []
    answers: list[UserAnswered] = []
    for record in records:
        kind = type(record)
        if kind is Intent:
            intents.append(record)  # type: ignore[arg-type]
        elif kind is ModelCallResult:
            results.append(record)  # type: ignore[arg-type]
        elif kind is StepCompleted:
            steps.append(record)  # type: ignore[arg-type]
        elif kind is UserAsked:
            asks.append(record)  # type: ignore[arg-type]
        elif kind is UserAnswered:
            answers.append(record)  # type: ignore[arg-type]
        elif kind is RunStarted:
            started = record  # type: ignore[assignment]
    return RunLog(
        started, tuple(intents), tuple(results), tuple(steps), None, tuple(asks), tuple(answers)
    )
