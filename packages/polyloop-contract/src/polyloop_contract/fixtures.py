"""The fixtures a downstream project overrides in its ``conftest.py``.

These defaults are registered only under ``--polyloop-contract``, and only for the names no
other plugin (``-p``, ``pytest_plugins``, an installed plugin) already provides: pytest lets
the plugin registered last win, and the kit's defaults must never shadow the project's
fixtures. Conftest fixtures always win. Each default of a required fixture skips the rules that
need it, with a message naming the fixture to provide, and notes it for the end-of-run report.
Fixtures may be parametrised to check several implementations in one run.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import NoReturn

import pytest

from polyloop.ports import Action, ActionExecutor, DecisionParser, EventSink, ModelClient, RunStore
from polyloop_contract import _report
from polyloop_contract.capabilities import StoreCapabilities
from polyloop_contract.leaks import RefusedStore

#: What a store callable returns: the store, or an async context manager yielding it (which
#: the kit leaves when the rule is done with the store), either of them directly or awaitable.
MadeStore = RunStore | AbstractAsyncContextManager[RunStore]
#: ``polyloop_store_factory``: returns a fresh, empty store on every call (sync or async).
StoreFactory = Callable[[], MadeStore | Awaitable[MadeStore]]
#: ``polyloop_store_reopen``: given a store from the factory, a new store object on its storage.
StoreReopen = Callable[[RunStore], MadeStore | Awaitable[MadeStore]]
#: ``polyloop_store_child_opener``: given a store from the factory, a picklable zero-argument
#: callable that opens a store object on the same storage when called in another process.
StoreChildOpener = Callable[[RunStore], Callable[[], RunStore | Awaitable[RunStore]]]


def missing(request: pytest.FixtureRequest, fixture: str, suite: str, what: str) -> NoReturn:
    """Skip the requesting rule because ``fixture`` is not provided, and say so in the report."""
    message = (
        f"{suite} suite not run: provide a fixture named {fixture!r} in your conftest.py "
        f"({what}); see the polyloop-contract README"
    )
    _report.note(request.config, f"SKIPPED {message}")
    pytest.skip(message)


@pytest.fixture
def polyloop_store_factory(request: pytest.FixtureRequest) -> StoreFactory:
    """A callable returning a fresh, empty RunStore on each call (may be async)."""
    missing(
        request,
        "polyloop_store_factory",
        "RunStore",
        "a callable, sync or async, that returns a fresh and empty RunStore on every call",
    )


@pytest.fixture
def polyloop_store_reopen() -> StoreReopen | None:
    """Given a store the factory returned, a new store object on the same storage."""
    return None


@pytest.fixture
def polyloop_store_child_opener() -> StoreChildOpener | None:
    """Given a store the factory returned, a picklable callable opening its storage elsewhere."""
    return None


@pytest.fixture
def polyloop_store_refused() -> Sequence[RefusedStore] | None:
    """Stores whose storage refuses them (a closed port, a wrong password), with the secrets
    they were given; for the rule ``errors hold no secrets``."""
    return None


@pytest.fixture
def polyloop_store_capabilities() -> StoreCapabilities:
    """The optional store capabilities declared off (by default: none)."""
    return StoreCapabilities()


@pytest.fixture
def polyloop_decision_parser(request: pytest.FixtureRequest) -> DecisionParser:
    """The DecisionParser under test."""
    missing(request, "polyloop_decision_parser", "DecisionParser", "your DecisionParser")


@pytest.fixture
def polyloop_model_client(request: pytest.FixtureRequest) -> ModelClient:
    """A ModelClient able to answer a short call."""
    missing(
        request,
        "polyloop_model_client",
        "ModelClient",
        "a ModelClient that can answer one short call, e.g. pointed at a local stub server",
    )


@pytest.fixture
def polyloop_model_client_failing(request: pytest.FixtureRequest) -> ModelClient:
    """A ModelClient whose backend fails: its ``call`` must raise."""
    missing(
        request,
        "polyloop_model_client_failing",
        "ModelClient (failure rule)",
        "the same ModelClient wired to a backend that fails, e.g. a closed port or an HTTP 500",
    )


@pytest.fixture
def polyloop_action_executor(request: pytest.FixtureRequest) -> ActionExecutor:
    """The ActionExecutor under test, with a healthy environment."""
    missing(request, "polyloop_action_executor", "ActionExecutor", "your ActionExecutor")


@pytest.fixture
def polyloop_action(request: pytest.FixtureRequest) -> Action:
    """An Action that ``polyloop_action_executor`` can execute successfully."""
    missing(
        request,
        "polyloop_action",
        "ActionExecutor",
        "an Action your executor executes successfully (EXECUTED)",
    )


@pytest.fixture
def polyloop_action_executor_failing(request: pytest.FixtureRequest) -> ActionExecutor:
    """An ActionExecutor whose environment is gone: ``polyloop_action`` must fail as ENV_ERROR."""
    missing(
        request,
        "polyloop_action_executor_failing",
        "ActionExecutor (environment failure rule)",
        "your executor with its environment broken, e.g. its session killed",
    )


@pytest.fixture
def polyloop_event_sink(request: pytest.FixtureRequest) -> EventSink:
    """The EventSink under test."""
    missing(request, "polyloop_event_sink", "EventSink", "your EventSink")


#: Every fixture name the kit reads, each with a default here.
FIXTURE_NAMES: tuple[str, ...] = (
    "polyloop_store_factory",
    "polyloop_store_reopen",
    "polyloop_store_child_opener",
    "polyloop_store_refused",
    "polyloop_store_capabilities",
    "polyloop_decision_parser",
    "polyloop_model_client",
    "polyloop_model_client_failing",
    "polyloop_action_executor",
    "polyloop_action",
    "polyloop_action_executor_failing",
    "polyloop_event_sink",
)


def defaults_plugin(config: pytest.Config) -> types.ModuleType:
    """A plugin holding the defaults of the fixtures no registered plugin provides yet."""
    # Conftest fixtures are scoped to their directory and parsed after this plugin, so they
    # win anyway; a default must stay for the directories whose conftest lacks the name.
    plugins = [
        plugin
        for name, plugin in config.pluginmanager.list_name_plugin()
        if plugin is not None and not str(name).endswith("conftest.py")
    ]
    provided = {name for name in FIXTURE_NAMES for p in plugins if hasattr(p, name)}
    this = sys.modules[__name__]
    plugin = types.ModuleType("polyloop_contract.default_fixtures")
    for name in FIXTURE_NAMES:
        if name not in provided:
            setattr(plugin, name, getattr(this, name))
    return plugin
