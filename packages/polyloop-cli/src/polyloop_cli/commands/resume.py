"""``polyloop resume RUN_ID --agent MODULE:FACTORY``: continue a run with its own agent — a
parked run after its decision, or one that crashed — until it stops or parks again."""

from __future__ import annotations

from typing import Any

import click

from polyloop.asking import RunParked, UserAsked
from polyloop.errors import (
    CorruptLogError,
    RunLeaseHeldError,
    RunNotFoundError,
    SnapshotMismatchError,
    UnsupportedStoreError,
)
from polyloop.recovery import pending_ask
from polyloop.session import resume_or_park
from polyloop.types import RunResult
from polyloop_cli.rendering.asks import ask_block, ask_json
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.agents import agent_options, opened_agent
from polyloop_cli.shared.command_kit import (
    StoreChoice,
    json_option,
    run_coroutine,
    run_not_found,
    store_choice,
    store_option,
)
from polyloop_cli.shared.errors import CliError, ExitCode, Refusal, refusals, shown_id
from polyloop_cli.shared.stores import open_store

__all__ = ["agent_option_words", "resume", "resume_and_report"]


@click.command()
@click.argument("run_id")
@agent_options
@store_option
@json_option
def resume(
    run_id: str, agent: str, episode_json: str | None, store: str | None, as_json: bool
) -> None:
    """Continue run RUN_ID with the agent FACTORY builds for it, until it stops or parks.

    A parked run goes on from its decision (approved: the action runs; rejected: the step
    ends not_executed and the model reads the reason; answered: the answer is the step's
    observation). Exit codes: 0 the run stopped (its stop reason is printed); 14 it waits for
    a person: on a new ask, or still on one not decided yet (shown, as by `polyloop pending`);
    5 no such run; 6 its log is corrupt; 12 it is being driven right now; 15 the agent is not
    the one the run started with (its parameters differ, listed); 22 the factory cannot be
    loaded, or cannot build the agent.
    """
    output = Output(as_json=as_json)
    resume_and_report(output, store_choice(store), run_id, agent, episode_json)


def resume_and_report(
    output: Output, choice: StoreChoice, run_id: str, agent: str, episode_json: str | None
) -> None:
    """Resume run ``run_id`` with ``agent``'s factory and say how it ended; a refusal or a
    new park is a :class:`CliError` of its exit code."""

    async def go() -> tuple[UserAsked | None, RunResult | RunParked]:
        """The ask the run waited on before (if any), and how the resume ended."""
        async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:
            log = await opened.read_log(run_id)
            if log.started is None:
                raise run_not_found(choice, run_id)
            async with opened_agent(agent, episode_json, run_id, opened) as built:
                return pending_ask(log), await resume_or_park(built.definition, built.request)

    with refusals(
        Refusal(RunNotFoundError, lambda error: run_not_found(choice, run_id)),
        Refusal(
            CorruptLogError,
            lambda error: CliError(
                ExitCode.CORRUPT_LOG,
                f"resume refused run {shown_id(run_id)}: its log is corrupt; "
                f"`{suggest('show', run_id, *choice.option)}` shows what it holds.",
                detail=str(error),
            ),
        ),
        Refusal(
            SnapshotMismatchError,
            lambda error: CliError(
                ExitCode.RESUME_REFUSED,
                f"resume refused run {shown_id(run_id)}: the agent --agent builds differs from "
                "the one the run started with; resume it with the same factory and --episode.",
                detail=str(error),
            ),
        ),
        Refusal(
            RunLeaseHeldError,
            lambda error: CliError(
                ExitCode.RUN_BUSY,
                f"run {shown_id(run_id)} is being driven right now; nothing was done.",
                detail=str(error),
            ),
        ),
        Refusal(
            UnsupportedStoreError,
            lambda error: CliError(
                ExitCode.USAGE,
                f"the {choice.url.kind} store cannot hold a run that waits for a person.",
                detail=str(error),
            ),
        ),
    ):
        before, outcome = run_coroutine(go())
    if isinstance(outcome, RunParked):
        same = before is not None and (before.step, before.arguments_sha256) == (
            outcome.ask.step,
            outcome.ask.arguments_sha256,
        )
        _parked(output, outcome, choice.option, agent_option_words(agent, episode_json), same)
        waits = (
            "still waits for a person: its ask (step {step}) is not decided yet"
            if same
            else "waits for a person again, on a new ask (step {step})"
        )
        raise CliError(
            ExitCode.PARKED,
            f"run {shown_id(run_id)} {waits.format(step=outcome.ask.step)}; decide it "
            f"(`{suggest('pending', *choice.option)}` shows how), then resume it again.",
        )
    _stopped(output, outcome)


def agent_option_words(agent: str, episode_json: str | None) -> tuple[str, ...]:
    """``--agent``/``--episode`` as the user gave them, for a command to print."""
    return ("--agent", agent, *(() if episode_json is None else ("--episode", episode_json)))


def _parked(
    output: Output,
    parked: RunParked,
    option: tuple[str, ...],
    agent: tuple[str, ...],
    same: bool,
) -> None:
    if output.as_json:
        document: dict[str, Any] = {
            "run_id": parked.run_id,
            "run_status": "waiting_approval",
            "steps": parked.steps_done,
            "pending_ask": ask_json(parked.ask),
        }
        output.json(document)
        return
    if same:
        output.line(f"Run {parked.run_id} still waits for a person; its ask is not decided yet:")
    else:
        output.line(
            f"Run {parked.run_id} waits for a person again, after {parked.steps_done} steps:"
        )
    output.line()
    ask_block(output, parked.ask, option, agent)


def _stopped(output: Output, result: RunResult) -> None:
    if output.as_json:
        output.json(
            {
                "run_id": result.run_id,
                "stop_reason": result.stop_reason.value,
                "steps": len(result.steps),
                "final_answer": result.final_answer,
            }
        )
        return
    output.line(
        f"Run {result.run_id} stopped: {result.stop_reason.value} after {len(result.steps)} steps."
    )
    if result.final_answer is not None:
        output.line(f"final answer: {result.final_answer}")
