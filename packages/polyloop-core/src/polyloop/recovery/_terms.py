"""An action's terms: the replay policy its intent records and whether its success ends the run.

The one statement of the rule: a tool-less action (code the executor runs, no tool called) is
``never`` to replay and completes nothing; a tool call takes its tool's ``replay_policy`` and
``completes_run``. The loop writes the action intent from it, ``resume`` checks the intent in
doubt against it, :func:`~polyloop.recovery.validate_log` checks every recorded action intent
against it (the tools' terms read from the run's parameter snapshot), and the record builders of
``polyloop.testing`` build intents from it.

Following ``replay policy never`` from a tool to resume takes three files: ``polyloop/tools.py``
(``ToolSpec.replay_policy``, ``NEVER`` by default), this one (the terms an action's intent is
written under, and :func:`repeated_on_resume`: only a ``safe`` intent in doubt is made again),
and ``polyloop/recovery/_table.py`` (``plan_resume``, whose ``_in_doubt`` turns a ``never``
intent in doubt into ``stop_state_unknown``; ``session/_resume.py`` carries that plan out, and
its ``_action_in_doubt`` refuses a replay whose intent disagrees with these terms).

It sits in ``recovery`` (below ``session``, beside ``tools``, which it never imports): any
object with a ``replay_policy`` and a ``completes_run`` — a ``ToolSpec`` — gives a tool's terms.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from polyloop.types import ReplayPolicy

__all__ = ["TOOL_LESS_TERMS", "ActionTerms", "ToolTerms", "action_terms", "repeated_on_resume"]


class ToolTerms(Protocol):
    """What a tool says about its calls (``polyloop.tools.ToolSpec`` is one)."""

    @property
    def replay_policy(self) -> ReplayPolicy: ...

    @property
    def completes_run(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ActionTerms:
    """The terms an action is announced under."""

    #: The ``replay_policy`` of the action's intent: may ``resume`` execute it again?
    replay_policy: ReplayPolicy
    #: An executed action under these terms completes the run (``TASK_COMPLETED``).
    completes_run: bool


#: The terms of every tool-less action.
TOOL_LESS_TERMS: Final = ActionTerms(replay_policy=ReplayPolicy.NEVER, completes_run=False)


def action_terms(
    tool_name: str | None, tool_terms: Callable[[str], ToolTerms | None]
) -> ActionTerms | None:
    """The terms of an action that calls ``tool_name`` (``None``: a tool-less action).

    ``tool_terms`` gives a tool's terms by name (``ToolRegistry.spec_for``, say), or ``None``
    when it does not know the tool; the answer is then ``None`` too: nothing is known.
    """
    if tool_name is None:
        return TOOL_LESS_TERMS
    tool = tool_terms(tool_name)
    if tool is None:
        return None
    return ActionTerms(replay_policy=tool.replay_policy, completes_run=tool.completes_run)


def repeated_on_resume(replay_policy: ReplayPolicy) -> bool:
    """Whether ``resume`` makes an intent in doubt (announced, never settled) again: only when
    its policy is ``safe``. Any other may or may not have happened, so the run stops with
    ``resume_state_unknown`` instead of repeating it."""
    return replay_policy is ReplayPolicy.SAFE
