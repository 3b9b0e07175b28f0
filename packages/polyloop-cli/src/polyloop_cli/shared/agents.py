"""``--agent MODULE:FACTORY`` of ``resume`` and ``edit``: the run's agent, built as a batch
builds an episode's (``factory(episode, store)``, design 0035), for one run.

The command only knows the store; the agent (model client, tools, executor) is the user's. The
episode is the run's id plus the ``--episode`` JSON object, handed to the factory untouched.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import click

from polyloop.batch import Episode, EpisodeAgent, FactoryError, load_factory, open_agent
from polyloop.ports import RunStore
from polyloop_cli.shared.errors import CliError, ExitCode, json_object_option

__all__ = ["agent_options", "opened_agent", "resume_options"]

F = TypeVar("F", bound=Callable[..., Any])


def agent_options(function: F) -> F:
    """``--agent`` (required) and ``--episode``."""
    return _agent_options(function, required=True)


def resume_options(function: F) -> F:
    """``--agent`` and ``--episode`` of a deciding command: given, the run is resumed at once."""
    return _agent_options(function, required=False)


def _agent_options(function: F, *, required: bool) -> F:
    function = click.option(
        "--episode",
        "episode_json",
        metavar="JSON",
        default=None,
        help="The episode's data as the factory reads it: a JSON object (its run_id is set to "
        "RUN_ID). Default: {}.",
    )(function)
    then = "" if required else " Given, the run is resumed right after the decision."
    return click.option(
        "--agent",
        "agent",
        metavar="MODULE:FACTORY",
        required=required,
        default=None,
        help="The callable that builds the run's agent, factory(episode, store), as for "
        f"`polyloop batch` (looked up from the current directory first).{then}",
    )(function)


def _episode(run_id: str, episode_json: str | None) -> Episode:
    if episode_json is None:
        return Episode(run_id, {"run_id": run_id})
    advice = """give a JSON object such as '{"task": "t-1"}'."""
    data = json_object_option(episode_json, "--episode", advice)
    return Episode(run_id, {**data, "run_id": run_id})


@asynccontextmanager
async def opened_agent(
    spec: str, episode_json: str | None, run_id: str, store: RunStore
) -> AsyncIterator[EpisodeAgent]:
    """The agent of run ``run_id`` on ``store``, held open until the block is left."""
    episode = _episode(run_id, episode_json)
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # as `python -m`: the current directory's modules first
    try:
        factory = load_factory(spec)
    except FactoryError as error:
        raise CliError(ExitCode.BAD_FACTORY, str(error)) from None
    async with contextlib.AsyncExitStack() as held:
        try:
            agent = await held.enter_async_context(open_agent(factory, episode, store))
        except FactoryError as error:
            raise CliError(ExitCode.BAD_FACTORY, str(error)) from None
        except Exception as error:
            # The factory is the user's code: what it raises is theirs to fix, not a bug here.
            raise CliError(
                ExitCode.BAD_FACTORY,
                f"the factory {spec} could not build the agent of run {run_id} "
                f"({type(error).__name__}); check it and --episode.",
                detail=str(error),
            ) from None
        try:
            yield agent
        except FactoryError as error:
            raise CliError(ExitCode.BAD_FACTORY, str(error)) from None
