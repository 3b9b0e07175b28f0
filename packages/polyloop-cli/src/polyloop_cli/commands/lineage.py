"""What ``show`` and ``fork`` say about a fork (design 0067): its source run and step, the
environment it continued in, a last step left in doubt, a copy cut short."""

from __future__ import annotations

from typing import Any

from polyloop.ports import RunLog
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id

__all__ = ["WORLD_AS_IS", "fork_fields", "fork_json", "refuse_incomplete_fork"]

#: What every fork's environment is at its fork step (design 0067).
WORLD_AS_IS = (
    "the world as it is: the source's actions before the fork step were not executed again, "
    "and the fork's own actions act on what the source (and anything since) left"
)


def _whole(log: RunLog) -> bool:
    started = log.started
    return (
        started is None
        or started.forked_at_step is None
        or (len(log.steps) >= started.forked_at_step)
    )


def fork_fields(log: RunLog) -> list[tuple[str, object]]:
    """The lines ``show`` adds for a fork; none for any other run."""
    started = log.started
    if started is None or started.forked_from_run_id is None:
        return []
    at = started.forked_at_step
    fields: list[tuple[str, object]] = [
        (
            "fork of",
            f"{started.forked_from_run_id} at step {at} (steps 0-{at - 1} inherited)"
            if at
            else f"{started.forked_from_run_id} at step 0 (nothing inherited)",
        ),
        ("environment", WORLD_AS_IS),
    ]
    if started.fork_left_in_doubt:
        fields.append(
            (
                "in doubt",
                f"step {at - 1 if at else 0}'s action was announced in the source and never "
                "settled; the fork recorded it not executed (it may or may not have happened)",
            )
        )
    if not _whole(log):
        fields.append(
            (
                "incomplete fork",
                "a crash cut its copy short; run the same `polyloop fork` again to complete it",
            )
        )
    return fields


def fork_json(log: RunLog) -> dict[str, Any] | None:
    """``show --json``'s ``fork`` object: ``None`` for a run that is no fork."""
    started = log.started
    if started is None or started.forked_from_run_id is None:
        return None
    return {
        "forked_from_run_id": started.forked_from_run_id,
        "forked_at_step": started.forked_at_step,
        "fork_left_in_doubt": started.fork_left_in_doubt,
        "complete": _whole(log),
        "environment": "world_as_is",
    }


def refuse_incomplete_fork(log: RunLog, run_id: str, refusal: str) -> None:
    """Raise exit 15 (``<refusal> run <id>: …``) for a fork whose copy a crash cut short:
    ``resume`` refuses it, a second ``fork`` with the same arguments completes it."""
    if _whole(log):
        return
    started = log.started
    assert started is not None
    raise CliError(
        ExitCode.RESUME_REFUSED,
        f"{refusal} run {shown_id(run_id)}: it is a fork of {shown_id(str(started.forked_from_run_id))} "
        f"at step {started.forked_at_step} whose copy a crash cut short; run the same "
        "`polyloop fork` again to complete it.",
    )
