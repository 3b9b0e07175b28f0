"""The ``polyloop`` command: inspect, verify, plan and export run logs; run the demo.

Every error a user can cause ends in one line on stderr saying what to do, and an exit code of
its class (:class:`~polyloop_cli.errors.ExitCode`); never in a traceback. Set
``POLYLOOP_DEBUG=1`` to get the traceback of an unexpected (internal) error.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from polyloop.ports import LeaseHolder, RunLog
from polyloop.serialization import dumps
from polyloop.stores.urls import shown_url
from polyloop.types import StepRecord
from polyloop_cli.errors import CliError, ExitCode, shown_id
from polyloop_cli.inspection import (
    StepSpan,
    corruption,
    full_step,
    holder_json,
    model_calls_json,
    model_usage_fields,
    plan_report,
    run_summary,
    run_totals,
    select_steps,
    step_row,
)
from polyloop_cli.invocation import suggest
from polyloop_cli.redaction import scrub_error
from polyloop_cli.render import Column, Fit, Output, status_text
from polyloop_cli.stores import (
    StoreUrl,
    damaged_message,
    default_store_url,
    lease_holder,
    list_run_ids,
    open_store,
    parse_store_url,
    read_log,
    read_run,
    salvage,
)

__all__ = ["cli", "main"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: How many unreadable records of a damaged log `show` names (``--json`` has them all).
UNREADABLE_SHOWN = 10

STORE_HELP = (
    "Store URL: sqlite:///abs/file.sqlite, sqlite:rel/file.sqlite, jsonl:///abs/dir, "
    "jsonl:rel/dir, postgresql://user@host:port/db?schema=name, or the scheme of any installed "
    "store (entry-point group polyloop.stores). Default: $POLYLOOP_STORE, else the demo store "
    "sqlite:$POLYLOOP_HOME/demo.sqlite (POLYLOOP_HOME defaults to ./.polyloop). A password is "
    "never printed: give it with PGPASSWORD or ~/.pgpass to paste the commands shown."
)


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def store_option(function: F) -> F:
    return click.option("--store", "store", metavar="URL", default=None, help=STORE_HELP)(function)


def json_option(function: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of tables."
    )(function)


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """The store a command reads, and how the user named it (for the commands it suggests)."""

    url: StoreUrl
    #: ``("--store", URL)`` when the user passed --store, else ``()`` (the default store).
    option: tuple[str, ...]

    @property
    def missing_advice(self) -> str:
        if self.option:
            return "pass --store with the path of an existing store."
        return f"run `{suggest('demo')}` to create the demo store, or pass --store."


def _store(value: str | None) -> StoreChoice:
    url = parse_store_url(value if value is not None else default_store_url())
    # Suggested commands name the store without its password (never printed).
    return StoreChoice(url, () if value is None else ("--store", shown_url(value.strip())))


def _not_found(choice: StoreChoice, run_id: str) -> CliError:
    return CliError(
        ExitCode.RUN_NOT_FOUND,
        f"no run {shown_id(run_id)} in the {choice.url.kind} store at {choice.url.location}; list "
        f"the runs with `{suggest('runs', *choice.option)}`.",
    )


async def _existing_log(choice: StoreChoice, run_id: str) -> RunLog:
    advice = f"`{suggest('show', run_id, *choice.option)}` shows what can be read."
    async with open_store(choice.url, missing_advice=choice.missing_advice) as store:
        log = await read_log(store, choice.url, run_id, advice=advice, name_store=not choice.option)
    if log == RunLog():
        raise _not_found(choice, run_id)
    return log


async def _existing_log_and_holder(
    choice: StoreChoice, run_id: str
) -> tuple[RunLog, LeaseHolder | None]:
    """The run's log and who drives it now (the lease is looked at first: a log read while a
    driver writes is at least as new as the answer)."""
    advice = f"`{suggest('show', run_id, *choice.option)}` shows what can be read."
    async with open_store(choice.url, missing_advice=choice.missing_advice) as store:
        holder = await lease_holder(store, choice.url, run_id)
        log = await read_log(store, choice.url, run_id, advice=advice, name_store=not choice.option)
    if log == RunLog():
        raise _not_found(choice, run_id)
    return log, holder


def _running(row: dict[str, Any]) -> str | None:
    """``pid 4711 on worker-3``: who drives a ``running`` run, where the store can tell."""
    holder = row.get("holder")
    if row["status"] != "running" or holder is None or holder["process_id"] is None:
        return None
    where = f" on {holder['host_name']}" if holder["host_name"] else ""
    return f"pid {holder['process_id']}{where}"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """PolyLoop run logs from the command line.

    Start with `polyloop demo`: an agent run killed with SIGKILL mid-action, then resumed.
    Then inspect its runs: `polyloop runs`, `polyloop show RUN_ID`, `polyloop plan RUN_ID`.
    Every command takes --store URL (default: the demo's store) and --json.
    """


# ---------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------


def _untrusted(
    choice: StoreChoice, bad_runs: Sequence[str], total: int, files: Sequence[str]
) -> CliError:
    """The error closing a listing in which some runs (or run files) cannot be trusted."""
    parts = []
    if bad_runs:
        named = ", ".join(shown_id(run_id) for run_id in bad_runs[:3])
        more = ", …" if len(bad_runs) > 3 else ""
        parts.append(f"{len(bad_runs)} of {total} runs are corrupt or damaged ({named}{more})")
    if files:
        parts.append(f"{len(files)} run file(s) cannot be read")
    return CliError(
        ExitCode.CORRUPT_LOG,
        f"{' and '.join(parts)}; `{suggest('verify', '--all', *choice.option)}` names the bad "
        "records.",
    )


@cli.command()
@store_option
@json_option
def runs(store: str | None, as_json: bool) -> None:
    """List the runs in a store: id, steps, stop reason, "running" or "unfinished"."""
    output = Output(as_json=as_json)
    choice = _store(store)
    url = choice.url

    async def collect() -> tuple[list[dict[str, Any]], Sequence[str]]:
        rows: list[dict[str, Any]] = []
        async with open_store(url, missing_advice=choice.missing_advice) as opened:
            listing = await list_run_ids(opened, url)
            for run_id in listing.run_ids:
                read = await read_run(opened, url, run_id)
                finished = read.damage is not None or read.log.finished is not None
                holder = None if finished else await lease_holder(opened, url, run_id)
                rows.append(run_summary(run_id, read.log, read.damage, holder))
        return rows, listing.unreadable

    rows, unreadable = _run(collect())
    if as_json:
        output.json({"store": str(url), "runs": rows, "unreadable": list(unreadable)})
    elif not rows:
        output.line(f"No runs in {url}. `{suggest('demo')}` makes some.")
    else:
        output.table(
            (Column("RUN ID"), Column("STEPS"), Column("STATUS"), Column("MODEL", Fit.TRUNCATE)),
            [
                (
                    row["run_id"],
                    "" if row["steps"] is None else row["steps"],
                    status_text(row["status"], row["stop_reason"], _running(row) or row["tail"]),
                    row["model"],
                )
                for row in rows
            ],
            title=f"Runs in {url}",
        )
    for problem in unreadable:
        output.line(f"unreadable run file: {problem}", style="red")
    bad = [row["run_id"] for row in rows if row["status"] == "corrupt"]
    if bad or unreadable:
        raise _untrusted(choice, bad, len(rows), unreadable)


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------


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


async def _log_to_show(choice: StoreChoice, run_id: str) -> ShownLog:
    async with open_store(choice.url, missing_advice=choice.missing_advice) as store:
        read = await read_run(store, choice.url, run_id)
        if read.damage is None:
            if read.log == RunLog():
                raise _not_found(choice, run_id)
            return ShownLog(read.log)
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


@cli.command()
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
    choice = _store(store)
    shown = _run(_log_to_show(choice, run_id))
    log = shown.log
    summary = run_summary(run_id, log, shown.damage)
    every_step = [completed.step for completed in log.steps]
    steps = select_steps(every_step, last=last, span=span)
    totals = run_totals(every_step, summary)
    # What a damaged log seems to have announced last is a guess: say nothing about it.
    pending = _pending(log) if shown.damage is None else []
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
            "pending": pending,
            "totals": totals,
        }
        if shown.damage is not None:
            document["unreadable_records"] = list(shown.unreadable)
        if full and log.started is not None:
            document["parameter_snapshot"] = dict(log.started.parameter_snapshot)
        output.json(document)
    else:
        _show_text(output, run_id, choice, shown, summary, steps, len(every_step), full)
        for item in pending:
            output.line(f"announced, never completed: {item}", style="yellow")
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
        ("status", status_text(summary["status"], summary["stop_reason"], summary["tail"])),
        ("steps", total),
    ]
    if log.finished is not None and log.finished.result.final_answer is not None:
        header.append(("final answer", log.finished.result.final_answer))
    if summary["tail"]:
        header.append(("resume plan", f"`{suggest('plan', run_id, *choice.option)}`"))
    header += model_usage_fields(log)
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


def _plain(value: object) -> str:
    """A field of ``--full`` as its JSON value, so ``null``, ``""`` and ``false`` differ."""
    return json.dumps(value, ensure_ascii=False)


def _pending(log: RunLog) -> list[str]:
    """Intents of the step after the last recorded one (announced, never completed), in words.

    On a finished run they are what it stopped on (e.g. ``resume_state_unknown``)."""
    next_step = len(log.steps)
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


# ---------------------------------------------------------------------------
# plan
# ---------------------------------------------------------------------------


@cli.command()
@click.argument("run_id")
@store_option
@json_option
def plan(run_id: str, store: str | None, as_json: bool) -> None:
    """What `resume` would do now, by the recovery table, and why. Calls no seam."""
    output = Output(as_json=as_json)
    choice = _store(store)
    log, holder = _run(_existing_log_and_holder(choice, run_id))
    verdict = corruption(log, run_id)
    if verdict is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"resume would refuse run {shown_id(run_id)}: its log is corrupt; "
            f"`{suggest('show', run_id, *choice.option)}` shows what it holds.",
            detail=verdict,
        )
    report = plan_report(log)
    refused_now = holder is not None and log.finished is None
    if as_json:
        lease = {"held": holder is not None, "holder": holder_json(holder)}
        output.json(
            {
                "run_id": run_id,
                "store": str(choice.url),
                **report.to_json(),
                "lease": lease,
                "resume_refused_now": refused_now,
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
    for assumption in report.assumptions:
        output.note(f"assumed: {assumption}", style="yellow")


# ---------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------


@cli.command()
@click.argument("run_id", required=False)
@click.option("--all", "check_all", is_flag=True, help="Verify every run in the store.")
@store_option
@json_option
def verify(run_id: str | None, check_all: bool, store: str | None, as_json: bool) -> None:
    """Validate run logs; exits non-zero on corruption, naming the record."""
    if (run_id is None) == (not check_all):
        raise click.UsageError("give either a RUN_ID or --all (not both, not neither).")
    output = Output(as_json=as_json)
    choice = _store(store)

    async def check() -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:
            if run_id is not None:
                ids: Sequence[str] = (run_id,)
            else:
                listing = await list_run_ids(opened, choice.url)
                ids = listing.run_ids
                for unreadable in listing.unreadable:
                    results.append({"run_id": None, "ok": False, "problem": unreadable})
            for current in ids:
                read = await read_run(opened, choice.url, current)
                if read.damage is not None:
                    results.append({"run_id": current, "ok": False, "problem": read.damage})
                    continue
                if read.log == RunLog() and run_id is not None:
                    raise _not_found(choice, current)
                problem = corruption(read.log, current)
                results.append({"run_id": current, "ok": problem is None, "problem": problem})
        return results

    results = _run(check())
    bad = [result for result in results if not result["ok"]]
    if as_json:
        output.json({"store": str(choice.url), "ok": not bad, "runs": results})
    else:
        for result in results:
            if result["ok"]:
                output.line(f"ok       {result['run_id']}", style="green")
            else:
                name = result["run_id"] if result["run_id"] is not None else "(unreadable file)"
                output.line(f"CORRUPT  {name}: {result['problem']}", style="bold red")
        if not results:
            output.line(f"No runs in {choice.url}.")
    if bad:
        first = bad[0]
        name = "a run file" if first["run_id"] is None else f"run {shown_id(first['run_id'])}"
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"{len(bad)} of {len(results)} run logs are corrupt; the first is {name}: back up "
            "the store before you repair or remove it.",
            detail=first["problem"],
        )


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


@cli.command()
@click.argument("run_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "snapshot"]),
    default="jsonl",
    show_default=True,
    help="jsonl: one StepRecord per line, exactly as polyloop.serialization.dumps writes it. "
    "snapshot: the whole run log as a trajectory snapshot (a pretty-printed JSON array of its "
    "records), the file polyloop_contract's trajectory_snapshot writes for a RunLog.",
)
@click.option(
    "--output",
    "-o",
    "output_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file instead of stdout.",
)
@click.option(
    "--mask",
    "masks",
    multiple=True,
    metavar="FIELD",
    help='With --format snapshot: show FIELD\'s value as "<masked>" wherever it occurs, the key '
    "kept: a record field (call_id, observation, step_wall_ms) or a parameter snapshot key "
    "(action_executor.session_id). The same masks as trajectory_snapshot(exclude=props(FIELD, ...)). Repeat it "
    "for several fields.",
)
@store_option
@json_option
def export(
    run_id: str,
    fmt: str,
    output_path: Path | None,
    masks: tuple[str, ...],
    store: str | None,
    as_json: bool,
) -> None:
    """Export a run's StepRecords, one JSON object per line (the analysis format), or its log.

    With --output and --json, a JSON summary of the export is printed on stdout.
    """
    if masks and fmt != "snapshot":
        raise CliError(
            ExitCode.USAGE,
            "--mask applies to --format snapshot only; add --format snapshot, or leave --mask "
            "out (the jsonl export is the analysis data, never masked).",
        )
    if "" in masks:
        raise CliError(ExitCode.USAGE, "--mask needs a field name, such as --mask call_id.")
    choice = _store(store)
    log = _run(_existing_log(choice, run_id))
    verdict = corruption(log, run_id)
    if verdict is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"refusing to export run {shown_id(run_id)}: its log is corrupt; "
            f"`{suggest('show', run_id, *choice.option)}` shows what it holds.",
            detail=verdict,
        )
    if fmt == "snapshot":
        lines, unmatched = _snapshot_text(log, masks)
        for name in unmatched:
            Output(as_json=as_json).note(
                f"--mask {name} matched no field of run {shown_id(run_id)}'s log "
                f"(nothing masked for it; `{suggest('show', run_id, '--full', *choice.option)}` "
                "lists the fields)."
            )
    else:
        lines = "".join(dumps(completed.step) + "\n" for completed in log.steps)
    if output_path is None:
        sys.stdout.write(lines)
        sys.stdout.flush()
        return
    try:
        output_path.write_text(lines, encoding="utf-8")
    except OSError as error:
        raise CliError(
            ExitCode.STORE_UNREADABLE,
            f"cannot write {output_path} ({error.strerror}); choose a writable --output path.",
        ) from None
    if as_json:
        summary: dict[str, object] = {
            "run_id": run_id,
            "format": fmt,
            "steps": len(log.steps),
            "output": str(output_path),
        }
        if masks:
            summary["masked"] = list(dict.fromkeys(masks))
        Output(as_json=True).json(summary)


def _snapshot_text(log: RunLog, masks: tuple[str, ...] = ()) -> tuple[str, list[str]]:
    """The run log as polyloop-contract's trajectory snapshot (an optional dependency), with
    ``masks`` masked; and the masks that matched no field."""
    try:
        from polyloop_contract.trajectory_json import trajectory_json
    except ImportError:
        raise CliError(
            ExitCode.USAGE,
            "--format snapshot needs the polyloop-contract package; install it with "
            "`pip install 'polyloop-cli[snapshot]'`, or export with --format jsonl.",
        ) from None
    names = frozenset(masks)
    matched: set[str] = set()

    def rule(name: str, path: tuple[str | int, ...]) -> bool:
        if name in names:
            matched.add(name)
            return True
        return False

    text = trajectory_json(log, mask=rule)
    return text, [name for name in dict.fromkeys(masks) if name not in matched]


def _register_demo() -> None:
    from polyloop_cli.batch import batch
    from polyloop_cli.demo import demo
    from polyloop_cli.steps import steps
    from polyloop_cli.view import view

    cli.add_command(demo)
    cli.add_command(batch)
    cli.add_command(steps)
    cli.add_command(view)


_register_demo()


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------


def _report(code: int, kind: str, message: str, as_json: bool) -> None:
    line = scrub_error(" ".join(message.split()))
    if as_json:
        sys.stderr.write(
            json.dumps({"error": {"code": code, "kind": kind, "message": line}}) + "\n"
        )
    else:
        sys.stderr.write(f"polyloop: error: {line}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point; exits with the code of the outcome."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    # The command reports its own errors, one line each. asyncio's child watcher may log a
    # warning when a killed worker is reaped by the transport first ("Unknown child process
    # pid"); that is harmless and would break the one-line contract of stderr.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    try:
        result = cli.main(args=args, prog_name="polyloop", standalone_mode=False)
    except CliError as error:
        _report(int(error.code), error.kind, error.line, as_json)
        sys.exit(int(error.code))
    except click.exceptions.NoArgsIsHelpError as error:
        # Bare `polyloop`: the help is the answer, not an error.
        sys.stdout.write(error.format_message() + "\n")
        sys.exit(0)
    except click.exceptions.UsageError as error:
        hint = ""
        if error.ctx is not None:
            words = error.ctx.command_path.split()[1:]
            hint = f" (see `{suggest(*words, '--help')}`)"
        _report(int(ExitCode.USAGE), "usage", error.format_message() + hint, as_json)
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.Abort:
        _report(130, "interrupted", "interrupted.", as_json)
        sys.exit(130)
    except click.ClickException as error:
        _report(error.exit_code, "usage", error.format_message(), as_json)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        _report(130, "interrupted", "interrupted.", as_json)
        sys.exit(130)
    except BrokenPipeError:
        # The reader went away (e.g. `polyloop export … | head`): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except Exception as error:
        if os.environ.get("POLYLOOP_DEBUG"):
            sys.stderr.write(scrub_error(traceback.format_exc()))
        bug = CliError(
            ExitCode.INTERNAL,
            f"unexpected {type(error).__name__}: this is a bug in polyloop; rerun with "
            "POLYLOOP_DEBUG=1 for the traceback and report it.",
            detail=str(error),
        )
        _report(int(bug.code), "internal", bug.line, as_json)
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
