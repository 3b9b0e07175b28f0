"""Fixtures and helpers shared by the RunStore suites."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

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


def _check_is_store(rule: Rule, store: object) -> RunStore:
    absent = [m for m in _METHODS if not callable(getattr(store, m, None))]
    rule.check(
        not absent,
        f"the object from the factory ({type(store).__name__}) lacks {', '.join(absent)}",
    )
    return store  # type: ignore[return-value]


def make_store_maker(factory: StoreFactory) -> MakeStore:
    async def make() -> RunStore:
        rule = Rule(SEAM, "the factory returns a RunStore")
        try:
            store: object = await resolve(factory())
        except Exception as error:
            rule.fail(f"polyloop_store_factory() raised {type(error).__name__}: {error}")
        return _check_is_store(rule, store)

    return make


def make_reopener(
    request: pytest.FixtureRequest,
    reopen: StoreReopen | None,
    capabilities: StoreCapabilities,
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
        return _check_is_store(rule, fresh)

    return again
