"""What ``show`` and ``fork`` say about a fork (design 0067): its source run and step, the
environment it continued in, a last step left in doubt, a copy cut short."""

from __future__ import annotations

from typing import Any

from polyloop.ports import RunLog
from polyloop.types import ActionStatus
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id

__all__ = [
    "REPLAYED_PREFIX",
    "WORLD_AS_IS",
    "fork_environment",
    "fork_fields",
    "fork_json",
    "refuse_incomplete_fork",
    "replayed_steps",
]

#: What every fork's environment is at its fork step (design 0067).
WORLD_AS_IS = (
    "the world as it is: the source's actions before the fork step were not executed again, "
    "and the fork's own actions act on what the source (and anything since) left"
)
#: A fork whose executor's fresh, isolated session was brought to the fork step (design 0072).
REPLAYED_PREFIX = (
    "a fresh, isolated session of the executor, brought to the fork step by executing the "
    "prefix's code again in it ({steps}); tool calls were not repeated and act on the world "
    "as it is"
)


def replayed_steps(log: RunLog) -> list[int]:
    """The prefix steps whose actions a fork executed again in its fresh session (design
    0072): the executed tool-less actions before the fork step; none when it replayed nothing."""
    started = log.started
    if started is None or not started.fork_replayed_prefix or started.forked_at_step is None:
        return []
    return [
        completed.step.step_idx
        for completed in log.steps[: started.forked_at_step]
        if completed.step.action_status is ActionStatus.EXECUTED
        and completed.step.tool_name is None
    ]


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
        ("environment", fork_environment(log)),
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


def fork_environment(log: RunLog) -> str:
    """What ``show`` and ``fork`` say of a fork's environment at its fork step."""
    started = log.started
    if started is None or not started.fork_replayed_prefix:
        return WORLD_AS_IS
    steps = replayed_steps(log)
    named = "steps " + ", ".join(map(str, steps)) if steps else "no step had code to replay"
    return REPLAYED_PREFIX.format(steps=named)


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
        "environment": "replayed_prefix" if started.fork_replayed_prefix else "world_as_is",
        "replayed_steps": replayed_steps(log),
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
