"""The user's factory: what builds an episode's agent, and how the runner opens and closes it.

A factory is a callable ``factory(episode, store)`` returning one of:

- an async context manager whose ``__aenter__`` gives an :class:`EpisodeAgent` — the way to own a
  per-episode resource such as a container session (``@contextlib.asynccontextmanager``): the
  runner leaves it on every path, whether the episode finished, was skipped, was refused, raised
  or was cancelled;
- an :class:`EpisodeAgent` (nothing to close), or an awaitable of one (an ``async def``).

The agent must use ``store`` — the batch's store — and the episode's run_id; anything else is
that episode's :class:`FactoryError`. Batches name factories as ``module:attribute`` (the
attribute may be dotted), loaded by :func:`load_factory`; workers of a distributed batch load it
by the same name, so it must be importable there too.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
from collections.abc import AsyncIterator, Awaitable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from polyloop.batch.episodes import Episode
from polyloop.batch.errors import FactoryError
from polyloop.ports import RunStore
from polyloop.session import AgentDefinition, RunRequest

__all__ = ["EpisodeAgent", "EpisodeFactory", "FactoryResult", "load_factory", "open_agent"]


@dataclass(frozen=True, slots=True)
class EpisodeAgent:
    """What ``run``/``resume`` need for one episode."""

    definition: AgentDefinition
    request: RunRequest


FactoryResult: TypeAlias = (
    AbstractAsyncContextManager[EpisodeAgent] | EpisodeAgent | Awaitable[EpisodeAgent]
)


@runtime_checkable
class EpisodeFactory(Protocol):
    """Builds the agent of one episode on the batch's store (see the module's docstring)."""

    def __call__(self, episode: Episode, store: RunStore, /) -> FactoryResult: ...


def load_factory(spec: str) -> EpisodeFactory:
    """The callable named ``module:attribute``, or a :class:`FactoryError` saying what failed."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise FactoryError(
            f"factory {spec!r} is not of the form module:factory (e.g. mybench.agent:build); "
            "name the module to import and the callable in it."
        )
    try:
        target: object = importlib.import_module(module_name)
    except Exception as error:
        raise FactoryError(
            f"cannot import module {module_name!r} of factory {spec!r} "
            f"({type(error).__name__}: {error}); install it or put its directory on PYTHONPATH."
        ) from None
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise FactoryError(
                f"module {module_name!r} has no attribute {attribute!r} (factory {spec!r}); "
                "check the name after the colon."
            ) from None
    if not callable(target):
        raise FactoryError(
            f"factory {spec!r} names a {type(target).__name__}, not a callable; name the "
            "function that builds an episode's agent."
        )
    return target


def _checked(agent: object, episode: Episode, store: RunStore) -> EpisodeAgent:
    if not isinstance(agent, EpisodeAgent):
        raise FactoryError(
            f"the factory gave {type(agent).__name__} for episode {episode.run_id!r}, not an "
            "EpisodeAgent (or an async context manager of one); return "
            "EpisodeAgent(definition, request)."
        )
    if agent.request.run_id != episode.run_id:
        raise FactoryError(
            f"the factory built run {agent.request.run_id!r} for episode {episode.run_id!r}; "
            "set RunRequest.run_id to episode.run_id, so a rerun finds the episode's run."
        )
    if agent.definition.store is not store:
        raise FactoryError(
            f"the factory's agent for episode {episode.run_id!r} uses another store than the "
            "batch's; pass the store the factory is given to AgentDefinition, so the batch and "
            "the run see the same log and lease."
        )
    return agent


@contextlib.asynccontextmanager
async def open_agent(
    factory: EpisodeFactory, episode: Episode, store: RunStore
) -> AsyncIterator[EpisodeAgent]:
    """Call the factory for ``episode`` and hold what it opened until the block is left."""
    made = factory(episode, store)
    if isinstance(made, AbstractAsyncContextManager) or (
        hasattr(made, "__aenter__") and hasattr(made, "__aexit__")
    ):
        async with made as agent:
            yield _checked(agent, episode, store)
        return
    if inspect.isawaitable(made):
        made = await made
    yield _checked(made, episode, store)
