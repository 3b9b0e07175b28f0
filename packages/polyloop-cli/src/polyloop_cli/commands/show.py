"""``polyloop show RUN_ID``: a run's trajectory, one row per step, then its totals; what a damaged
log still holds."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click
from rich.cells import cell_len

from polyloop.asking import UserAsked
from polyloop.ports import LeaseHolder, RunLog
from polyloop.recovery import answer_to, pending_ask
from polyloop.types import StepRecord
from polyloop_cli.commands.conversation import earlier_turns
from polyloop_cli.commands.lineage import fork_fields, fork_json
from polyloop_cli.demo.approval import known_agent
from polyloop_cli.rendering.asks import ask_block, ask_headline, ask_json
from polyloop_cli.rendering.inspection import (
    StepSpan,
    asks_json,
    full_step,
    model_calls_json,
    model_requests_json,
    model_usage_fields,
    run_summary,
    run_totals,
    select_steps,
    step_row,
    unfinished_step,
)
from polyloop_cli.rendering.invocation import command_lines, suggest
from polyloop_cli.rendering.render import GAP, Column, Fit, Output, status_text
from polyloop_cli.shared.command_kit import (
    StoreChoice,
    json_option,
    run_coroutine,
    run_not_found,
    status_detail,
    store_choice,
    store_option,
)
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id
from polyloop_cli.shared.stores import (
    damaged_message,
    lease_holder,
    open_store,
    read_run,
    salvage,
)

__all__ = ["show"]

#: How many unreadable records of a damaged log `show` names (``--json`` has them all).
UNREADABLE_SHOWN = 10


def _step_span(context: click.Context, parameter: click.Parameter, value: str | None) -> Any:
    """``--steps``: ``FROM-TO``, ``FROM-``, ``-TO`` or one step index (steps count from 0)."""
    if value is None:
        return None
    text = value.strip()
    if re.fullmatch(r"\d+", text):
        return StepSpan(int(text), int(text))
    both = re.fullmatch(r"(\d*)-(\d*)", text)
    if both is None or text == "-":
        raise click.BadParameter(
            f"{value!r} is not a step range: write FROM-TO (e.g. 10-20), FROM-, -TO or one "
            "step; steps count from 0.",
            context,
            parameter,
        )
    first, last = (int(part) if part else None for part in both.groups())
    if first is not None and last is not None and first > last:
        raise click.BadParameter(
            f"{value!r} ends before it starts: write FROM-TO with FROM <= TO.", context, parameter
        )
    return StepSpan(first, last)


@dataclass(frozen=True, slots=True)
class ShownLog:
    """What ``show`` has of a run: its log (or what could be salvaged of it), and why not all."""

    log: RunLog
    #: The store's account of why it cannot read the log; ``None`` when it could.
    damage: str | None = None
    #: With ``damage``: one line per record that could not be salvaged.
    unreadable: tuple[str, ...] = ()
    #: The runs before this one in its conversation of follow-up runs, the first run first.
    earlier_turns: tuple[str, ...] = ()
    #: Who held the run's lease just before the log was read (``None``: nobody, or a store
    #: without leases).
    holder: LeaseHolder | None = None


async def _log_to_show(choice: StoreChoice, run_id: str) -> ShownLog:
    async with open_store(choice.url, missing_advice=choice.missing_advice) as store:
        # The lease first: a log read while a driver writes is at least as new as the answer.
        holder = await lease_holder(store, choice.url, run_id)
        read = await read_run(store, choice.url, run_id)
        if read.damage is None:
            if read.log == RunLog():
                raise run_not_found(choice, run_id)
            return ShownLog(
                read.log,
                earlier_turns=await earlier_turns(store, choice.url, read.log),
                holder=holder,
            )
        saved = await salvage(store, choice.url, run_id)
        return ShownLog(saved.log, read.damage, saved.unreadable)


def _duration(milliseconds: int) -> str:
    if milliseconds < 10_000:
        return f"{milliseconds} ms"
    seconds = milliseconds / 1000
    if seconds < 600:
        return f"{seconds:.1f} s"
    minutes, second = divmod(round(seconds), 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours} h {minute:02d} min" if hours else f"{minute} min {second:02d} s"


def _totals_line(totals: dict[str, Any]) -> str:
    if totals["status"] == "finished":
        ending = f"stop reason {totals['stop_reason']}"
    elif totals["status"] == "corrupt":
        ending = "log corrupt"
    else:
        ending = f"{totals['status']}" + (f", tail {totals['tail']}" if totals["tail"] else "")
    return (
        f"Totals: {totals['steps']} steps, {totals['executed_actions']} executed actions, "
        f"{totals['parse_failures']} parse failures, wall time {_duration(totals['wall_ms'])}, "
        f"{ending}."
    )


def _step_table(output: Output, steps: Sequence[StepRecord]) -> None:
    text = Fit.TRUNCATE
    columns = (
        Column("STEP"),
        Column("ACTION", text),
        Column("PARSE"),
        Column("STATUS"),
        Column("OBSERVATION", text),
        Column("SYNTH"),
        Column("MS"),
    )
    # On a terminal the table cuts the text to fit; piped, each cell keeps 160 characters.
    width = 10_000 if output.terminal else 160
    rows = []
    for step in steps:
        row = step_row(step, width=width)
        rows.append(
            (
                row["step"],
                row["action"],
                row["parse_ok"],
                row["status"],
                row["observation"],
                row["synthetic"],
                row["wall_ms"],
            )
        )
    output.table(columns, rows)


@click.command()
@click.argument("run_id")
@click.option("--full", is_flag=True, help="Every StepRecord field, and the parameter snapshot.")
@click.option(
    "--last",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Only the last N steps.",
)
@click.option(
    "--steps",
    "span",
    metavar="FROM-TO",
    default=None,
    callback=_step_span,
    help="Only these steps: FROM-TO (both included), FROM-, -TO, or one step; from 0.",
)
@store_option
@json_option
def show(
    run_id: str,
    full: bool,
    last: int | None,
    span: StepSpan | None,
    store: str | None,
    as_json: bool,
) -> None:
    """Show a run's trajectory: one row per step, then the run's totals."""
    if last is not None and span is not None:
        raise click.UsageError("give --last or --steps, not both.")
    output = Output(as_json=as_json)
    choice = store_choice(store)
    shown = run_coroutine(_log_to_show(choice, run_id))
    log = shown.log
    summary = run_summary(run_id, log, shown.damage, shown.holder)
    every_step = [completed.step for completed in log.steps]
    steps = select_steps(every_step, last=last, span=span)
    totals = run_totals(every_step, summary)
    # What a damaged log seems to have announced last is a guess: say nothing about it.
    ask = pending_ask(log) if summary["run_status"] is not None else None
    pending = _pending(log, ask) if shown.damage is None else []
    readable = shown.damage is None and summary["corrupt"] is None
    unfinished = unfinished_step(log, shown.holder) if readable else None
    if as_json:
        document: dict[str, Any] = {
            "store": str(choice.url),
            **summary,
            "final_answer": None if log.finished is None else log.finished.result.final_answer,
            "event_delivery_failures": None
            if log.finished is None
            else log.finished.result.event_delivery_failures,
            "steps": [full_step(step) if full else step_row(step, width=10_000) for step in steps],
            "model_calls": model_calls_json(log),
            "model_requests": model_requests_json(log),
            "pending": pending,
            "unfinished_step": None if unfinished is None else unfinished.to_json(),
            "totals": totals,
            "queued_input": None if log.started is None else log.started.queued_input,
            "pending_ask": None if ask is None else ask_json(ask),
            "asks": asks_json(log),
            "conversation": [*shown.earlier_turns, run_id],
            "fork": fork_json(log),
        }
        if shown.damage is not None:
            document["unreadable_records"] = list(shown.unreadable)
        if full and log.started is not None:
            document["parameter_snapshot"] = dict(log.started.parameter_snapshot)
        output.json(document)
    else:
        _show_text(output, run_id, choice, shown, summary, steps, len(every_step), full)
        if ask is not None:
            output.line()
            output.line("Waiting for a person:", style="bold magenta")
            ask_block(output, ask, choice.option, known_agent(log, choice.url))
            output.line()
        decided = _decided_not_carried_out(log) if shown.damage is None else None
        if decided is not None:
            output.line(decided, style="magenta")
        if pending:
            output.line(
                "Announced and not completed:"
                if unfinished is None
                else f"Step {unfinished.step} unfinished, {unfinished.words}:",
                style="yellow",
            )
        for item in pending:
            output.line(f"  {item}", style="yellow")
        output.line(_totals_line(totals), style="bold")
    if shown.damage is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            damaged_message(
                run_id, choice.url, f"shown: the {len(every_step)} step(s) that could be read."
            ),
            detail=shown.damage,
        )
    if summary["corrupt"]:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"the log of run {shown_id(run_id)} is corrupt, so resume would refuse it; shown: "
            "what it holds.",
            detail=summary["corrupt"],
        )


def _show_text(
    output: Output,
    run_id: str,
    choice: StoreChoice,
    shown: ShownLog,
    summary: dict[str, Any],
    steps: Sequence[StepRecord],
    total: int,
    full: bool,
) -> None:
    log = shown.log
    header: list[tuple[str, object]] = [
        ("run", run_id),
        ("store", str(choice.url)),
        (
            "status",
            status_text(
                summary["status"], summary["stop_reason"], status_detail(summary) or summary["tail"]
            ),
        ),
        ("steps", total),
    ]
    if summary["started_at"] is not None:
        header.insert(2, ("started", summary["started_at"]))
    if log.started is not None and log.started.queued_input is not None:
        chain = " → ".join((*shown.earlier_turns, run_id))
        header.append(
            (
                "follows",
                f"{log.started.follows_run_id} (turn {len(shown.earlier_turns) + 1}: {chain})",
            )
        )
        header.append(("user input", log.started.queued_input))
    header += fork_fields(log)
    if log.finished is not None and log.finished.result.final_answer is not None:
        header.append(("final answer", log.finished.result.final_answer))
    usage = model_usage_fields(log)
    if summary["tail"]:
        # A command to paste: laid out for the value column, continued with ` \`.
        key_width = max(cell_len(key) for key, _ in [*header, *usage, ("resume plan", "")])
        width = None if output.columns is None else output.columns - key_width - GAP
        plan = command_lines(suggest("plan", run_id, *choice.option), width)
        header.append(("resume plan", "\n".join(plan)))
    header += usage
    output.fields(header)
    output.line()
    for problem in shown.unreadable[:UNREADABLE_SHOWN]:
        output.line(f"unreadable record: {problem}", style="red")
    if len(shown.unreadable) > UNREADABLE_SHOWN:
        more = len(shown.unreadable) - UNREADABLE_SHOWN
        output.line(f"… and {more} more unreadable records (--json lists them all)", style="red")
    if len(steps) < total:
        selected = f"{steps[0].step_idx}-{steps[-1].step_idx} " if steps else ""
        output.line(f"Showing steps {selected}({len(steps)} of {total}).", style="dim")
    if not steps:
        output.line("No step recorded." if total == 0 else "No step in the selection.")
    elif full:
        for step in steps:
            output.fields(
                [(key, _plain(value)) for key, value in full_step(step).items()],
                title=f"Step {step.step_idx}",
            )
            output.line()
    else:
        _step_table(output, steps)
    if full and log.started is not None:
        output.fields(sorted(log.started.parameter_snapshot.items()), title="Parameter snapshot")


def _decided_not_carried_out(log: RunLog) -> str | None:
    """A line for an unfinished run whose last ask is decided but not yet carried out."""
    if log.finished is not None or not log.asks or log.asks[-1].step != len(log.steps):
        return None
    last = log.asks[-1]
    answered = answer_to(log, last)
    if answered is None:
        return None
    who = f" by {answered.decided_by}" if answered.decided_by else ""
    return (
        f"Decided: {ask_headline(last)} — {answered.verdict.value}{who} at "
        f"{answered.decided_at}; resume carries it out."
    )


def _plain(value: object) -> str:
    """A field of ``--full`` as its JSON value, so ``null``, ``""`` and ``false`` differ."""
    return json.dumps(value, ensure_ascii=False)


def _pending(log: RunLog, ask: UserAsked | None = None) -> list[str]:
    """Intents of the step after the last recorded one (announced, not completed), in words.

    On a finished run they are what it stopped on (e.g. ``resume_state_unknown``). A parked
    run's step (``ask``) is left out: it waits for a person, which is said instead."""
    next_step = len(log.steps)
    if ask is not None and ask.step == next_step:
        return []
    results = {result.result_id: result for result in log.model_results}
    items: list[str] = []
    for intent in log.intents:
        if intent.call_index != next_step:
            continue
        if intent.kind.value == "model_call":
            result = results.get(intent.result_id)
            if result is None:
                state = "no result recorded"
            elif result.reply is not None:
                state = f"reply recorded: {' '.join(result.reply.content.split())[:120]!r}"
            else:
                state = f"failure recorded: {result.failure}"
        else:
            state = "no outcome recorded"
        items.append(
            f"step {intent.call_index} {intent.kind.value} intent {intent.result_id!r} "
            f"(replay policy {intent.replay_policy.value}): {state}"
        )
    return items
