"""``follow_up``: the next turn of a conversation, as a new run that continues a finished one.

The seeds let no message into a running run, so a user's next input starts a new run (design
0052). Its ``RunStarted`` names the run it follows and holds the input (``follows_run_id``,
``queued_input``); its prompt is the conversation so far: the request's own context, then, for
every run of the chain from the first, the input it started with and its recorded steps exactly
as the loop put them into history, then the new input. The chain is read from the store, so the
caller passes the same base request every turn, and ``resume`` rebuilds the same prompt.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Sequence

from polyloop.asking import RunParked
from polyloop.errors import (
    ConfigurationError,
    CorruptLogError,
    RunNotFinishedError,
    RunNotFoundError,
)
from polyloop.ports import RunLog, RunStore
from polyloop.recovery import validate_log
from polyloop.session._deciding import AskHandler
from polyloop.session._definition import OBSERVATION_TOKEN, AgentDefinition, RunRequest
from polyloop.session._gates import DEFAULT_REJECTED_TEMPLATE, ApprovalPolicy
from polyloop.session._loop import (
    DEFAULT_EVENT_TIMEOUT_SECONDS,
    Asking,
    Clock,
    check_options,
    leased,
    start,
)
from polyloop.types import (
    Context,
    Message,
    Role,
    RunResult,
    RunStarted,
    StopReason,
    TextBlock,
)

__all__ = ["conversation", "follow_up", "followed_request", "resumed_request"]

#: The snapshot key of the template a recorded run wrapped its observations in.
_TEMPLATE_KEY = "request.observation_template"


async def follow_up(
    definition: AgentDefinition,
    previous_run_id: str,
    request: RunRequest,
    user_input: str,
    *,
    clock: Clock = time.monotonic,
    event_timeout_seconds: float = DEFAULT_EVENT_TIMEOUT_SECONDS,
    lease_wait_seconds: float = 0.0,
    approval_policy: ApprovalPolicy | None = None,
    rejected_template: str = DEFAULT_REJECTED_TEMPLATE,
    ask_now: AskHandler | None = None,
) -> RunResult | RunParked:
    """Start run ``request.run_id`` as the next turn after run ``previous_run_id``, like
    :func:`run_or_park` (a gated follow-up may park; an ungated one returns its result).

    ``request`` is the conversation's base request (the context the first run was started
    with; only ``run_id`` differs from turn to turn). The new run's model sees that context,
    the whole chain's inputs and steps, then ``user_input``. Raises :class:`RunNotFoundError`
    when a run of the chain has no log in ``definition.store``, :class:`RunNotFinishedError`
    when one has not finished (resume it first), :class:`CorruptLogError` for a corrupt log or a
    chain that loops, and everything :func:`run_or_park` raises. A follow-up run that stops
    half-way or parks is continued with :func:`resume_or_park` and the same base request.
    """
    check_options(clock, event_timeout_seconds, lease_wait_seconds)
    if not isinstance(user_input, str) or not isinstance(previous_run_id, str):
        raise ConfigurationError(
            "follow_up(previous_run_id, …, user_input) takes two strings: the id of the run to "
            "continue and the user's new input."
        )
    if previous_run_id == request.run_id:
        raise ConfigurationError(
            f"follow_up was given run_id {request.run_id!r} for both the previous and the new "
            "run; a follow-up is a new run: give the request a new run_id."
        )
    asking = Asking.of(request, definition, approval_policy, rejected_template, ask_now)
    chain = await conversation(definition.store, previous_run_id)
    followed = followed_request(request, chain, user_input)
    begin = functools.partial(start, follows_run_id=previous_run_id, queued_input=user_input)
    return await leased(
        begin, definition, followed, clock, event_timeout_seconds, lease_wait_seconds, asking
    )


async def conversation(store: RunStore, last_run_id: str) -> tuple[RunLog, ...]:
    """The finished logs of the chain that ends with run ``last_run_id``, first run first."""
    chain: list[RunLog] = []
    seen: set[str] = set()
    run_id: str | None = last_run_id
    while run_id is not None:
        if run_id in seen:
            raise CorruptLogError(
                f"Run {last_run_id!r}: its chain of follow-up runs loops back to run {run_id!r}; "
                "a RunStarted's follows_run_id was edited. Start a new conversation."
            )
        seen.add(run_id)
        log = await store.read_log(run_id)
        if log.started is None:
            raise RunNotFoundError(
                f"Run {run_id!r} has no RunStarted record in this store, so no follow-up can "
                "continue its conversation; check the run id and the store."
            )
        validate_log(log, run_id)
        if log.finished is None:
            raise RunNotFinishedError(
                f"Run {run_id!r} has not finished, so its conversation cannot be continued "
                "yet; resume it until it stops (`polyloop plan` says what resume would do), "
                "then start the follow-up."
            )
        chain.append(log)
        run_id = log.started.follows_run_id
    return tuple(reversed(chain))


async def resumed_request(store: RunStore, request: RunRequest, started: RunStarted) -> RunRequest:
    """The request a run started by ``started`` is continued with: ``request`` itself, or for
    a follow-up run its conversation rebuilt from the store, as :func:`follow_up` built it."""
    if started.follows_run_id is None or started.queued_input is None:
        return request
    chain = await conversation(store, started.follows_run_id)
    return followed_request(request, chain, started.queued_input)


def followed_request(request: RunRequest, chain: Sequence[RunLog], user_input: str) -> RunRequest:
    """``request`` with the conversation of ``chain`` and ``user_input`` after its goal."""
    messages: list[Message] = list(request.context.goal_level)
    for log in chain:
        # conversation() returns started, finished logs only.
        assert log.started is not None
        assert log.finished is not None
        if log.started.queued_input is not None:
            messages.append(_text(Role.USER, log.started.queued_input))
        template = log.started.parameter_snapshot.get(_TEMPLATE_KEY, request.observation_template)
        answered = log.finished.result.stop_reason is StopReason.AGENT_FINISHED
        for index, completed in enumerate(log.steps):
            step = completed.step
            messages.append(_text(Role.ASSISTANT, step.raw_output))
            # A final answer's observation is empty: the conversation goes on with the user.
            if answered and index == len(log.steps) - 1:
                continue
            messages.append(_text(Role.USER, template.replace(OBSERVATION_TOKEN, step.observation)))
    messages.append(_text(Role.USER, user_input))
    context = Context(request.context.run_level, tuple(messages))
    return dataclasses.replace(request, context=context)


def _text(role: Role, text: str) -> Message:
    return Message(role=role, content=(TextBlock(text),))
