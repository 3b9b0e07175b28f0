"""``polyloop plan RUN_ID``: what `resume` would do now, by the recovery table, and why."""

from __future__ import annotations

import click

from polyloop.recovery import pending_ask, run_status
from polyloop_cli.commands.lineage import refuse_incomplete_fork
from polyloop_cli.demo.approval import known_agent
from polyloop_cli.rendering.asks import ask_block, ask_headline, ask_json
from polyloop_cli.rendering.inspection import holder_json, plan_report
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.command_kit import (
    existing_log_and_holder,
    json_option,
    refuse_corrupt,
    run_coroutine,
    store_choice,
    store_option,
)

__all__ = ["plan"]


@click.command()
@click.argument("run_id")
@store_option
@json_option
def plan(run_id: str, store: str | None, as_json: bool) -> None:
    """What `resume` would do now, by the recovery table, and why. Calls no seam."""
    output = Output(as_json=as_json)
    choice = store_choice(store)
    log, holder = run_coroutine(existing_log_and_holder(choice, run_id))
    refuse_corrupt(choice, log, run_id, "resume would refuse")
    refuse_incomplete_fork(log, run_id, "resume would refuse")
    report = plan_report(log)
    refused_now = holder is not None and log.finished is None
    ask = pending_ask(log)
    if as_json:
        lease = {"held": holder is not None, "holder": holder_json(holder)}
        output.json(
            {
                "run_id": run_id,
                "store": str(choice.url),
                **report.to_json(),
                "lease": lease,
                "resume_refused_now": refused_now,
                "run_status": run_status(log).value,
                "pending_ask": None if ask is None else ask_json(ask),
            }
        )
        return
    data = report.to_json()
    pairs: list[tuple[str, object]] = [
        ("run", run_id),
        ("tail state", data["state"]),
        ("resume would", data["move"]),
        ("next step", data["next_step"]),
    ]
    if data["stop_reason"]:
        pairs.append(("stop reason", data["stop_reason"]))
    intent = data["intent_in_doubt"]
    if intent:
        pairs.append(
            (
                "in doubt",
                f"{intent['kind']} intent {intent['result_id']!r} of step "
                f"{intent['call_index']}, replay policy {intent['replay_policy']}",
            )
        )
    pairs.append(("why", data["reason"]))
    if ask is not None:
        pairs.append(
            (
                "waits for",
                f"a person: {ask_headline(ask)}, since {ask.asked_at}; resume carries out the "
                "decision once one is recorded",
            )
        )
    if refused_now:
        assert holder is not None
        pairs.append(
            (
                "right now",
                f"resume would be refused: the run is being driven by {holder.describe()}; "
                "wait for it to finish (or resume with lease_wait_seconds)",
            )
        )
    output.fields(pairs, title=f"Resume plan for {run_id}")
    if ask is not None:
        output.line()
        ask_block(output, ask, choice.option, known_agent(log, choice.url))
    for assumption in report.assumptions:
        output.note(f"assumed: {assumption}", style="yellow")
