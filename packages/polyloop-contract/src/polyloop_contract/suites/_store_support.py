"""Fixtures and helpers shared by the RunStore suites."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, cast

import pytest
import pytest_asyncio

from polyloop.ports import RunStore
from polyloop_contract import _report
from polyloop_contract._checks import Rule, resolve
from polyloop_contract.capabilities import StoreCapabilities
from polyloop_contract.fixtures import StoreFactory, StoreReopen, missing

SEAM = "RunStore"
_METHODS = (
    "write_run_started",
    "write_intent",
    "write_model_call_result",
    "write_step_completed",
    "write_run_finished",
    "read_log",
    "parameters",
)

MakeStore = Callable[[], Coroutine[Any, Any, RunStore]]
Reopen = Callable[[RunStore], Coroutine[Any, Any, RunStore]]


def param_suffix(request: pytest.FixtureRequest) -> str:
    name = request.node.name
    return f" (for {name[name.index('[') :]})" if "[" in name else ""


def require_capability(
    request: pytest.FixtureRequest, capabilities: StoreCapabilities, name: str
) -> None:
    """Skip the rule, saying so in the report, when the store declared ``name`` off."""
    if capabilities.has(name):
        return
    reason = capabilities.off[name]
    message = f"RunStore capability {name!r} declared off{param_suffix(request)}: {reason}"
    _report.note(request.config, f"DECLARED OFF {message}")
    pytest.skip(message)


def _absent_methods(candidate: object) -> list[str]:
    return [m for m in _METHODS if not callable(getattr(candidate, m, None))]


def _check_is_store(rule: Rule, store: object, source: str = "the factory") -> RunStore:
    absent = _absent_methods(store)
    rule.check(
        not absent,
        f"the object from {source} ({type(store).__name__}) lacks {', '.join(absent)}",
    )
    return store  # type: ignore[return-value]


class StoreScope:
    """The stores one rule (or one hypothesis example) made, cleaned up when it is done.

    A factory (or reopen callable) may return an async context manager instead of a store:
    the kit enters it to get the store and leaves it when the rule, or the example of the
    stateful rule, no longer uses the store — on the event loop that used it, in reverse
    order of making. A store returned as it is stays the project's to close.
    """

    def __init__(self) -> None:
        self._exits = AsyncExitStack()

    async def adopt(self, rule: Rule, made: object, source: str) -> RunStore:
        """The store ``made`` is, or the one it yields when it is an async context manager."""
        if _absent_methods(made) and callable(getattr(made, "__aenter__", None)):
            manager = cast(AbstractAsyncContextManager[object], made)
            try:
                made = await self._exits.enter_async_context(manager)
            except Exception as error:
                rule.fail(
                    f"entering the async context manager that {source} returned raised "
                    f"{type(error).__name__}: {error}"
                )
        return _check_is_store(rule, made, source)

    async def aclose(self) -> None:
        """Leave every context manager entered, naming the first clean-up that failed."""
        rule = Rule(SEAM, "the stores the factory made clean up")
        await rule.call(
            "leaving the async context manager of a store (its clean-up)", self._exits.aclose()
        )


def make_store_maker(factory: StoreFactory, scope: StoreScope) -> MakeStore:
    async def make() -> RunStore:
        rule = Rule(SEAM, "the factory returns a RunStore")
        try:
            made: object = await resolve(factory())
        except Exception as error:
            rule.fail(f"polyloop_store_factory() raised {type(error).__name__}: {error}")
        return await scope.adopt(rule, made, "polyloop_store_factory()")

    return make


def make_reopener(
    request: pytest.FixtureRequest,
    reopen: StoreReopen | None,
    capabilities: StoreCapabilities,
    scope: StoreScope,
) -> Reopen:
    require_capability(request, capabilities, "reopen")
    if reopen is None:
        missing(
            request,
            "polyloop_store_reopen",
            "RunStore durability",
            "a callable that takes a store the factory returned and opens a new store object "
            "on the same storage; or declare StoreCapabilities(off={'reopen': '<why>'}) in "
            "polyloop_store_capabilities",
        )
    function = reopen

    async def again(store: RunStore) -> RunStore:
        rule = Rule(SEAM, "polyloop_store_reopen returns a RunStore")
        try:
            fresh: object = await resolve(function(store))
        except Exception as error:
            rule.fail(f"polyloop_store_reopen(store) raised {type(error).__name__}: {error}")
        return await scope.adopt(rule, fresh, "polyloop_store_reopen(store)")

    return again


# ---------------------------------------------------------------------------
# Fixtures the store suites import (pytest finds a fixture in the module that imports it)
# ---------------------------------------------------------------------------

#: Every rule runs on an event loop of its own, which its stores' clean-up shares.
aio = pytest.mark.asyncio(loop_scope="function")


@pytest_asyncio.fixture(loop_scope="function")
async def store_scope() -> AsyncIterator[StoreScope]:
    """The stores this rule makes, cleaned up after it on its own event loop."""
    scope = StoreScope()
    yield scope
    await scope.aclose()


@pytest.fixture
def reopen(
    request: pytest.FixtureRequest,
    polyloop_store_reopen: StoreReopen | None,
    polyloop_store_capabilities: StoreCapabilities,
    store_scope: StoreScope,
) -> Reopen:
    return make_reopener(request, polyloop_store_reopen, polyloop_store_capabilities, store_scope)


def capability_store_fixture(
    name: str, *, declared: str, seam: type, rules: str, without: str
) -> Any:
    """A fixture ``name`` of the suite of an optional store capability: a :data:`MakeStore`
    whose stores implement ``seam`` (a runtime-checkable Protocol of :mod:`polyloop.ports`).

    A rule that uses it is skipped, with one report line, when the store declared capability
    ``declared`` off, or when its store does not implement ``seam`` (``RunStore <rules> rules did
    not apply …: <Type> does not implement polyloop.ports.<Seam>, <without>``). Assign it to a
    module attribute of the same name in the suite: pytest finds fixtures there.
    """

    def fixture(
        request: pytest.FixtureRequest,
        polyloop_store_factory: StoreFactory,
        polyloop_store_capabilities: StoreCapabilities,
        store_scope: StoreScope,
    ) -> MakeStore:
        require_capability(request, polyloop_store_capabilities, declared)
        make = make_store_maker(polyloop_store_factory, store_scope)

        async def make_capable() -> RunStore:
            store = await make()
            if not isinstance(store, seam):
                message = (
                    f"RunStore {rules} rules did not apply{param_suffix(request)}: "
                    f"{type(store).__name__} does not implement polyloop.ports.{seam.__name__}, "
                    f"{without}"
                )
                _report.note(request.config, f"NOT APPLICABLE {message}")
                pytest.skip(message)
            return store

        return make_capable

    fixture.__name__ = fixture.__qualname__ = name
    fixture.__doc__ = f"Makes stores that implement polyloop.ports.{seam.__name__}."
    return pytest.fixture(fixture, name=name)
