"""The messages a recorded run sent to its model, rebuilt as ``resume`` rebuilds its prompt.

The log records no prompt (design 0061): a model call's messages are the request's context, the
tool section, the injections and the goal, then one assistant/user pair per finished step, and
only the steps are in the log. Given the request the run was started with, the same code that
built the prompt (``Prompt``, and for a follow-up run the conversation read from the store)
gives the messages again; the caller compares their size with each step's recorded
``prompt_chars`` to know whether the request was really the run's.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyloop.ports import RunLog, RunStore
from polyloop.session._definition import RunRequest
from polyloop.session._follow_up import resumed_request
from polyloop.session._prompt import Prompt
from polyloop.types import Message

__all__ = ["RebuiltPrompt", "rebuilt_prompt"]


@dataclass(frozen=True, slots=True)
class RebuiltPrompt:
    """What the model of a recorded run was sent, rebuilt from its request and its log."""

    #: The messages before the first step's: context, tool section, injections, goal (for a
    #: follow-up run, the conversation so far and the turn's input are the goal's end).
    prefix: tuple[Message, ...]
    #: How many messages at the end of ``prefix`` are the goal level (the task itself).
    goal_messages: int
    #: Each recorded step's history messages, in step order (two per step: the reply as it
    #: went back into history, then the wrapped observation).
    history: tuple[tuple[Message, ...], ...]
    #: The characters of the messages of call ``k`` (before step ``k``), for every recorded
    #: step and the next call: what each ``StepRecord.prompt_chars`` recorded.
    chars_before: tuple[int, ...]

    def messages_of_call(self, k: int) -> tuple[Message, ...]:
        """The messages of model call ``k`` (``0`` to the number of recorded steps)."""
        return self.prefix + tuple(message for pair in self.history[:k] for message in pair)


async def rebuilt_prompt(store: RunStore, request: RunRequest, log: RunLog) -> RebuiltPrompt:
    """The messages of every model call of the run whose log is ``log``, built with ``request``
    (the request it was started with) as ``resume`` builds them; a follow-up run's conversation
    is read from ``store``. Nothing is called and nothing written."""
    if log.started is not None:
        request = await resumed_request(store, request, log.started)
    prompt = Prompt(request)
    prefix = prompt.model_call(0, request.run_id, "rebuilt", {}).messages
    chars = [prompt.chars]
    history: list[tuple[Message, ...]] = []
    for completed in log.steps:
        before = len(prompt.model_call(0, request.run_id, "rebuilt", {}).messages)
        prompt.add_step(completed.step)
        messages = prompt.model_call(0, request.run_id, "rebuilt", {}).messages
        history.append(messages[before:])
        chars.append(prompt.chars)
    return RebuiltPrompt(prefix, len(request.context.goal_level), tuple(history), tuple(chars))
