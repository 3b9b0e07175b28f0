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
import sys
import traceback
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from polyloop.ports import LeaseHolder, RunLog
from polyloop.serialization import dumps, to_dict
from polyloop_cli.errors import CliError, ExitCode
from polyloop_cli.inspection import corruption, holder_json, plan_report, run_summary, step_row
from polyloop_cli.render import Output, status_text
from polyloop_cli.stores import (
    StoreUrl,
    default_store_url,
    lease_holder,
    list_run_ids,
    open_store,
    parse_store_url,
    read_log,
)

__all__ = ["cli", "main"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = (
    "Store URL: sqlite:///abs/file.sqlite, sqlite:rel/file.sqlite, jsonl:///abs/dir or "
    "jsonl:rel/dir. Default: $POLYLOOP_STORE, else the demo store "
    "sqlite:$POLYLOOP_HOME/demo.sqlite (POLYLOOP_HOME defaults to ./.polyloop)."
)


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def store_option(function: F) -> F:
    return click.option("--store", "store", metavar="URL", default=None, help=STORE_HELP)(function)


def json_option(function: F) -> F:
    return click.option(
        "--json", "as_json", is_flag=True, help="Print one JSON document instead of tables."
    )(function)


def _store_url(value: str | None) -> StoreUrl:
    return parse_store_url(value if value is not None else default_store_url())


async def _existing_log(url: StoreUrl, run_id: str) -> RunLog:
    return (await _existing_log_and_holder(url, run_id))[0]


async def _existing_log_and_holder(url: StoreUrl, run_id: str) -> tuple[RunLog, LeaseHolder | None]:
    """The run's log and who drives it now (the lease is looked at first: a log read while a
    driver writes is at least as new as the answer)."""
    async with open_store(url) as store:
        holder = await lease_holder(store, url, run_id)
        log = await read_log(store, url, run_id)
    if log == RunLog():
        raise CliError(
            ExitCode.RUN_NOT_FOUND,
            f"no run {run_id!r} in the {url.kind} store at {url.path}; list the runs with "
            f"`polyloop runs --store {url}`.",
        )
    return log, holder


def _running(status: str, holder: dict[str, Any] | None) -> str:
    """``running (pid 4711 on worker-3)``: the STATUS cell of a run being driven now."""
    if status != "running" or holder is None or holder["process_id"] is None:
        return ""
    where = f" on {holder['host_name']}" if holder["host_name"] else ""
    return f" (pid {holder['process_id']}{where})"


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


@cli.command()
@store_option
@json_option
def runs(store: str | None, as_json: bool) -> None:
    """List the runs in a store: id, steps, stop reason, "running" or "unfinished"."""
    output = Output(as_json=as_json)
    url = _store_url(store)

    async def collect() -> tuple[list[dict[str, Any]], Sequence[str]]:
        rows: list[dict[str, Any]] = []
        async with open_store(url) as opened:
            listing = await list_run_ids(opened, url)
            for run_id in listing.run_ids:
                try:
                    log = await read_log(opened, url, run_id)
                except CliError as error:
                    if error.code is not ExitCode.CORRUPT_LOG:
                        raise
                    rows.append(
                        {
                            "run_id": run_id,
                            "started": None,
                            "steps": None,
                            "model": "",
                            "status": "corrupt",
                            "stop_reason": None,
                            "tail": None,
                            "corrupt": error.message,
                            "holder": None,
                        }
                    )
                    continue
                holder = None if log.finished else await lease_holder(opened, url, run_id)
                rows.append(run_summary(run_id, log, holder))
        return rows, listing.unreadable

    rows, unreadable = _run(collect())
    if as_json:
        output.json({"store": str(url), "runs": rows, "unreadable": list(unreadable)})
        return
    if not rows:
        output.line(f"No runs in {url}. Run `polyloop demo` to make some.")
    else:
        output.table(
            ("RUN ID", "STEPS", "STATUS", "TAIL STATE", "MODEL"),
            [
                (
                    row["run_id"],
                    "" if row["steps"] is None else row["steps"],
                    status_text(row["status"], row["stop_reason"]).append(
                        _running(row["status"], row["holder"])
                    ),
                    row["tail"] or "",
                    row["model"],
                )
                for row in rows
            ],
            title=f"Runs in {url}",
        )
    for problem in unreadable:
        output.note(f"unreadable run file: {problem}", style="red")


# ---------------------------------------------------------------------------
# show
# ---------------------------------------------------------------------------


@cli.command()
@click.argument("run_id")
@click.option("--full", is_flag=True, help="Every StepRecord field, and the parameter snapshot.")
@store_option
@json_option
def show(run_id: str, full: bool, store: str | None, as_json: bool) -> None:
    """Show a run's trajectory: one row per step."""
    output = Output(as_json=as_json)
    url = _store_url(store)
    log = _run(_existing_log(url, run_id))
    summary = run_summary(run_id, log)
    steps = [completed.step for completed in log.steps]
    pending = _pending(log)
    if as_json:
        document: dict[str, Any] = {
            "store": str(url),
            **summary,
            "final_answer": None if log.finished is None else log.finished.result.final_answer,
            "event_delivery_failures": None
            if log.finished is None
            else log.finished.result.event_delivery_failures,
            "steps": [to_dict(step) if full else step_row(step, width=10_000) for step in steps],
            "pending": pending,
        }
        if full and log.started is not None:
            document["parameter_snapshot"] = dict(log.started.parameter_snapshot)
        output.json(document)
    else:
        header: list[tuple[str, object]] = [
            ("run", run_id),
            ("store", str(url)),
            ("status", status_text(summary["status"], summary["stop_reason"])),
            ("steps", len(steps)),
        ]
        if log.finished is not None and log.finished.result.final_answer is not None:
            header.append(("final answer", log.finished.result.final_answer))
        if summary["tail"]:
            header.append(("tail state", f"{summary['tail']} (see `polyloop plan {run_id}`)"))
        output.fields(header)
        output.line()
        if full:
            for step in steps:
                output.fields(
                    [(key, _plain(value)) for key, value in to_dict(step).items()],
                    title=f"Step {step.step_idx}",
                )
                output.line()
            if log.started is not None:
                output.fields(
                    sorted(log.started.parameter_snapshot.items()), title="Parameter snapshot"
                )
        elif steps:
            columns = ("STEP", "ACTION", "PARSE", "STATUS", "OBSERVATION", "SYNTH", "MS")
            width = 60 if output.terminal else 160
            table_rows = []
            for step in steps:
                row = step_row(step, width=width)
                table_rows.append(
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
            output.table(columns, table_rows)
        else:
            output.line("No step recorded.")
        for item in pending:
            output.line(f"announced, never completed: {item}", style="yellow")
    if summary["corrupt"]:
        raise CliError(ExitCode.CORRUPT_LOG, f"run {run_id!r}: {summary['corrupt']}")


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
    url = _store_url(store)
    log, holder = _run(_existing_log_and_holder(url, run_id))
    verdict = corruption(log, run_id)
    if verdict is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"resume would refuse run {run_id!r}: {verdict}",
        )
    report = plan_report(log)
    refused_now = holder is not None and log.finished is None
    if as_json:
        lease = {"held": holder is not None, "holder": holder_json(holder)}
        output.json(
            {
                "run_id": run_id,
                "store": str(url),
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
    url = _store_url(store)

    async def check() -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        async with open_store(url) as opened:
            if run_id is not None:
                ids: Sequence[str] = (run_id,)
            else:
                listing = await list_run_ids(opened, url)
                ids = listing.run_ids
                for unreadable in listing.unreadable:
                    results.append({"run_id": None, "ok": False, "problem": unreadable})
            for current in ids:
                try:
                    log = await read_log(opened, url, current)
                except CliError as error:
                    if error.code is not ExitCode.CORRUPT_LOG:
                        raise
                    results.append({"run_id": current, "ok": False, "problem": error.message})
                    continue
                if log == RunLog() and run_id is not None:
                    raise CliError(
                        ExitCode.RUN_NOT_FOUND,
                        f"no run {current!r} in the {url.kind} store at {url.path}; list the "
                        f"runs with `polyloop runs --store {url}`.",
                    )
                problem = corruption(log, current)
                results.append({"run_id": current, "ok": problem is None, "problem": problem})
        return results

    results = _run(check())
    bad = [result for result in results if not result["ok"]]
    if as_json:
        output.json({"store": str(url), "ok": not bad, "runs": results})
    else:
        for result in results:
            if result["ok"]:
                output.line(f"ok       {result['run_id']}", style="green")
            else:
                name = result["run_id"] if result["run_id"] is not None else "(unreadable file)"
                output.line(f"CORRUPT  {name}: {result['problem']}", style="bold red")
        if not results:
            output.line(f"No runs in {url}.")
    if bad:
        first = bad[0]
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"{len(bad)} of {len(results)} run log(s) corrupt; first: "
            f"{first['run_id'] or '(file)'}: {first['problem']}",
        )


# ---------------------------------------------------------------------------
# export
# ---------------------------------------------------------------------------


@cli.command()
@click.argument("run_id")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl"]),
    default="jsonl",
    show_default=True,
    help="jsonl: one StepRecord per line, exactly as polyloop.serialization.dumps writes it.",
)
@click.option(
    "--output",
    "-o",
    "output_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write to this file instead of stdout.",
)
@store_option
@json_option
def export(
    run_id: str, fmt: str, output_path: Path | None, store: str | None, as_json: bool
) -> None:
    """Export a run's StepRecords, one JSON object per line (the analysis format).

    With --output and --json, a JSON summary of the export is printed on stdout.
    """
    url = _store_url(store)
    log = _run(_existing_log(url, run_id))
    verdict = corruption(log, run_id)
    if verdict is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"refusing to export run {run_id!r}, its log is corrupt: {verdict}",
        )
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
            f"cannot write {output_path}: {error.strerror}; choose a writable --output path.",
        ) from None
    if as_json:
        Output(as_json=True).json(
            {"run_id": run_id, "format": fmt, "steps": len(log.steps), "output": str(output_path)}
        )


def _register_demo() -> None:
    from polyloop_cli.demo import demo

    cli.add_command(demo)


_register_demo()


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------


def _report(code: int, kind: str, message: str, as_json: bool) -> None:
    line = " ".join(message.split())
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
        _report(int(error.code), error.kind, error.message, as_json)
        sys.exit(int(error.code))
    except click.exceptions.NoArgsIsHelpError as error:
        # Bare `polyloop`: the help is the answer, not an error.
        sys.stdout.write(error.format_message() + "\n")
        sys.exit(0)
    except click.exceptions.UsageError as error:
        hint = ""
        if error.ctx is not None:
            hint = f" (see `{error.ctx.command_path} --help`)"
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
            traceback.print_exc()
        _report(
            int(ExitCode.INTERNAL),
            "internal",
            f"unexpected {type(error).__name__}: {error}. This is a bug in polyloop; rerun with "
            "POLYLOOP_DEBUG=1 for the traceback and report it.",
            as_json,
        )
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
