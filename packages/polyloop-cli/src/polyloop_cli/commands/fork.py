"""``polyloop fork RUN --at K --agent MODULE:FACTORY``: a new run from step K of run RUN, driven
by another agent (design 0067); prints the lineage and how the fork's parameters differ."""

from __future__ import annotations

from typing import Any

import click

from polyloop.asking import RunParked
from polyloop.errors import (
    ConfigurationError,
    CorruptLogError,
    RunAlreadyStartedError,
    RunLeaseHeldError,
    RunNotFoundError,
    UnsupportedStoreError,
)
from polyloop.ports import RunLog
from polyloop.session import SnapshotDifference, fork, parameter_differences
from polyloop.types import RunResult
from polyloop_cli.commands.lineage import fork_environment, fork_json
from polyloop_cli.rendering.asks import ask_block, ask_json
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Column, Fit, Output
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

__all__ = ["fork_command"]


@click.command("fork")
@click.argument("source_run_id", metavar="RUN")
@click.option(
    "--at",
    "at_step",
    type=click.IntRange(min=0),
    required=True,
    help="The step the new agent takes first; steps before it are RUN's, copied.",
)
@click.option(
    "--run-id",
    "run_id",
    default=None,
    help="The fork's run id (default: RUN-fork-at-K).",
)
@click.option(
    "--in-doubt-observation",
    "in_doubt_observation",
    metavar="TEXT",
    default=None,
    help="Fork although RUN's step K-1 announced an action that never settled: that step is "
    "recorded not executed (in doubt), with TEXT as the observation the new agent reads.",
)
@click.option(
    "--replay-prefix/--no-replay-prefix",
    "replay_prefix",
    default=None,
    help="Bring the agent's executor to step K by executing RUN's code actions again in its "
    "fresh, isolated session (an executor that declares it can, e.g. the container "
    "executor); --no-replay-prefix goes on against the environment as it is. Default: "
    "replay when the executor can. Tool calls are never repeated.",
)
@agent_options
@store_option
@json_option
def fork_command(
    source_run_id: str,
    at_step: int,
    run_id: str | None,
    in_doubt_observation: str | None,
    replay_prefix: bool | None,
    agent: str,
    episode_json: str | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Fork run RUN at step K: a new run whose log holds RUN's steps before K (RUN's log is
    not changed), then the agent FACTORY builds drives step K onward until it stops or parks.

    Nothing of RUN's prefix is called or asked again; its code is executed again only in a
    fresh, isolated session (--replay-prefix), else the fork continues against the world as it
    is. Prints the lineage and the parameters in which the fork's agent differs
    from RUN's (model, binding, budget, templates, parser). Exit codes: 0 the fork stopped;
    14 it parked on an ask; 2 RUN cannot be forked at K, or the fork's run id is taken; 5 no
    such run; 6 RUN's log is corrupt; 12 the fork's run is being driven; 22 the factory cannot
    be loaded.
    """
    output = Output(as_json=as_json)
    choice = store_choice(store)
    new_id = run_id if run_id is not None else f"{source_run_id}-fork-at-{at_step}"
    _fork_and_report(
        output,
        choice,
        source_run_id,
        at_step,
        new_id,
        in_doubt_observation,
        agent,
        episode_json,
        replay_prefix,
    )


def _fork_and_report(
    output: Output,
    choice: StoreChoice,
    source_run_id: str,
    at_step: int,
    new_id: str,
    in_doubt_observation: str | None,
    agent: str,
    episode_json: str | None,
    replay_prefix: bool | None = None,
) -> None:
    async def go() -> tuple[RunResult | RunParked, tuple[SnapshotDifference, ...], RunLog]:
        async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:
            source = await opened.read_log(source_run_id)
            if source.started is None:
                raise run_not_found(choice, source_run_id)
            async with opened_agent(agent, episode_json, new_id, opened) as built:
                outcome = await fork(
                    built.definition,
                    built.request,
                    source_run_id=source_run_id,
                    at_step=at_step,
                    in_doubt_observation=in_doubt_observation,
                    replay_prefix=replay_prefix,
                )
            forked = await opened.read_log(new_id)
            assert forked.started is not None
            differences = parameter_differences(
                source.started.parameter_snapshot, forked.started.parameter_snapshot
            )
            return outcome, differences, forked

    with refusals(
        Refusal(RunNotFoundError, lambda error: run_not_found(choice, source_run_id)),
        Refusal(
            CorruptLogError,
            lambda error: CliError(
                ExitCode.CORRUPT_LOG,
                f"fork refused run {shown_id(source_run_id)}: its log is corrupt; "
                f"`{suggest('show', source_run_id, *choice.option)}` shows what it holds.",
                detail=str(error),
            ),
        ),
        Refusal(
            RunAlreadyStartedError,
            lambda error: CliError(
                ExitCode.USAGE,
                f"run {shown_id(new_id)} already exists; give the fork another --run-id.",
                detail=str(error),
            ),
        ),
        Refusal(
            ConfigurationError,
            lambda error: CliError(
                ExitCode.USAGE,
                f"run {shown_id(source_run_id)} cannot be forked at step {at_step} like this.",
                detail=str(error),
            ),
        ),
        Refusal(
            RunLeaseHeldError,
            lambda error: CliError(
                ExitCode.RUN_BUSY,
                f"run {shown_id(new_id)} is being driven right now; nothing was done.",
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
        outcome, differences, forked = run_coroutine(go())
    described = fork_json(forked)
    assert described is not None
    lineage: dict[str, Any] = {
        "run_id": new_id,
        "forked_from_run_id": source_run_id,
        "forked_at_step": at_step,
        "fork_left_in_doubt": described["fork_left_in_doubt"],
        "environment": described["environment"],
        "replayed_steps": described["replayed_steps"],
        "parameter_differences": [
            {"key": d.key, "source": d.source, "fork": d.fork} for d in differences
        ],
    }
    if isinstance(outcome, RunParked):
        if output.as_json:
            output.json(
                {
                    **lineage,
                    "run_status": "waiting_approval",
                    "steps": outcome.steps_done,
                    "pending_ask": ask_json(outcome.ask),
                }
            )
        else:
            _lineage_text(output, lineage, differences, fork_environment(forked))
            output.line(f"Run {new_id} waits for a person after {outcome.steps_done} steps:")
            output.line()
            ask_block(output, outcome.ask, choice.option)
        raise CliError(
            ExitCode.PARKED,
            f"fork {shown_id(new_id)} waits for a person (step {outcome.ask.step}); decide it "
            f"(`{suggest('pending', *choice.option)}` shows how), then resume it.",
        )
    if output.as_json:
        output.json(
            {
                **lineage,
                "stop_reason": outcome.stop_reason.value,
                "steps": len(outcome.steps),
                "final_answer": outcome.final_answer,
            }
        )
        return
    _lineage_text(output, lineage, differences, fork_environment(forked))
    output.line(
        f"Run {new_id} stopped: {outcome.stop_reason.value} after {len(outcome.steps)} steps "
        f"({at_step} inherited)."
    )
    if outcome.final_answer is not None:
        output.line(f"final answer: {outcome.final_answer}")


def _lineage_text(
    output: Output,
    lineage: dict[str, Any],
    differences: tuple[SnapshotDifference, ...],
    environment: str,
) -> None:
    at = lineage["forked_at_step"]
    fields: list[tuple[str, object]] = [
        ("run", lineage["run_id"]),
        ("fork of", f"{lineage['forked_from_run_id']} at step {at}"),
        ("environment", environment),
    ]
    if lineage["fork_left_in_doubt"]:
        fields.append(("in doubt", f"step {at - 1} recorded not executed (may have happened)"))
    output.fields(fields)
    output.line()
    if not differences:
        output.line("Parameters: the same as the source's.")
    else:
        output.line(f"Parameters that differ from {lineage['forked_from_run_id']}'s:")
        output.table(
            (Column("KEY"), Column("SOURCE", Fit.FOLD), Column("FORK", Fit.FOLD)),
            [(d.key, _shown(d.source), _shown(d.fork)) for d in differences],
        )
    output.line()


def _shown(value: str | None) -> str:
    return "<absent>" if value is None else value
