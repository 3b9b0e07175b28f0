"""``polyloop export RUN_ID``: a run's StepRecords as JSON Lines, or its log as a trajectory
snapshot."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from polyloop.ports import RunLog
from polyloop.serialization import dumps
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.command_kit import (
    existing_log,
    json_option,
    output_option,
    refuse_corrupt,
    run_coroutine,
    store_choice,
    store_option,
)
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id

__all__ = ["export"]


@click.command()
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
@output_option("Write to this file instead of stdout.")
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
    choice = store_choice(store)
    log = run_coroutine(existing_log(choice, run_id))
    refuse_corrupt(choice, log, run_id, "refusing to export")
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
