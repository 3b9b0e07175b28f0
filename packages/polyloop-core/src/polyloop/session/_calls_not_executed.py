"""What the model is told about the tool calls of its reply that a step did not execute.

A step executes one action (design 0045): when a reply carries several tool calls the first is
executed and the others are recorded in ``StepRecord.calls_not_executed``. History then carries
the step's observation followed by :func:`calls_not_executed_notice`, so the model never
believes that a call it made ran. The notice is built from the record alone, so a resumed run
rebuilds exactly the history the first invocation had.
"""

from __future__ import annotations

from collections.abc import Sequence

from polyloop.types import CallNotExecuted

__all__ = ["calls_not_executed_notice", "observation_in_history"]


def calls_not_executed_notice(calls: Sequence[CallNotExecuted]) -> str:
    """The fixed sentences and one line per call not executed (``name arguments``)."""
    listed = "\n".join(f"- {call.tool_name} {call.tool_arguments}" for call in calls)
    count = "this call was" if len(calls) == 1 else f"these {len(calls)} calls were"
    return (
        f"Only the first tool call of your reply was executed; {count} NOT executed:\n"
        f"{listed}\n"
        "Request tool calls one at a time, one call per reply."
    )


def observation_in_history(observation: str, calls: Sequence[CallNotExecuted]) -> str:
    """The text history carries for a step: its observation, then the notice when some of the
    reply's calls were not executed (after a blank line; the notice alone when the observation
    is empty)."""
    if not calls:
        return observation
    notice = calls_not_executed_notice(calls)
    return f"{observation}\n\n{notice}" if observation else notice
