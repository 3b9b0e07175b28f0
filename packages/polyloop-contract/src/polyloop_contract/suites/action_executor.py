"""ActionExecutor contract: parameters rules, outcomes, environment failures as ENV_ERROR."""

from __future__ import annotations

import inspect

import pytest

from polyloop.ports import Action, ActionExecutor
from polyloop.types import ActionOutcome, ActionStatus
from polyloop_contract._checks import (
    Rule,
    check_parameters_no_io,
    check_parameters_shape,
    check_parameters_stable_no_secrets,
)
from polyloop_contract.suites._cancel import check_cancellation_passes_through

SEAM = "ActionExecutor"
aio = pytest.mark.asyncio


@aio
async def test_execute_returns_an_outcome(
    polyloop_action_executor: ActionExecutor, polyloop_action: Action
) -> None:
    """execute is a coroutine method and runs the sample action to an EXECUTED outcome."""
    rule = Rule(SEAM, "execute returns an ActionOutcome")
    rule.check(
        inspect.iscoroutinefunction(polyloop_action_executor.execute),
        "execute is not declared `async def`; the loop awaits it",
    )
    outcome = await rule.call(
        f"execute({polyloop_action!r})", polyloop_action_executor.execute(polyloop_action)
    )
    rule.check(
        isinstance(outcome, ActionOutcome),
        f"execute returned {type(outcome).__name__}, not ActionOutcome",
    )
    rule.check(
        outcome.status is ActionStatus.EXECUTED,
        f"the sample action (polyloop_action) came back {outcome.status.value!r}, not "
        f"'executed', with observation {outcome.observation!r}; provide an action your "
        "executor runs successfully",
    )
    rule.check(
        isinstance(outcome.observation, str),
        f"observation is {type(outcome.observation).__name__}, not str",
    )


@aio
async def test_environment_failure_is_env_error(
    polyloop_action_executor_failing: ActionExecutor, polyloop_action: Action
) -> None:
    """With its environment gone, the executor raises or returns ENV_ERROR, never EXECUTED."""
    rule = Rule(SEAM, "environment failure is ENV_ERROR")
    try:
        outcome = await polyloop_action_executor_failing.execute(polyloop_action)
    except Exception:
        return
    rule.check(
        isinstance(outcome, ActionOutcome) and outcome.status is ActionStatus.ENV_ERROR,
        f"with its environment broken the executor returned {outcome!r}; it must raise or "
        "return status ENV_ERROR, or the run goes on against a dead environment",
    )


@aio
async def test_cancellation_passes_through(
    polyloop_action_executor: ActionExecutor, polyloop_action: Action
) -> None:
    """Cancelling an action in flight ends it with CancelledError."""
    await check_cancellation_passes_through(
        SEAM, f"execute({polyloop_action!r})", polyloop_action_executor.execute(polyloop_action)
    )


def test_parameters_are_synchronous_and_str_valued(
    polyloop_action_executor: ActionExecutor,
) -> None:
    """parameters() is a plain method returning a mapping of str to str."""
    check_parameters_shape(SEAM, polyloop_action_executor)


def test_parameters_do_no_io_and_are_cheap(polyloop_action_executor: ActionExecutor) -> None:
    """parameters() opens no file, socket or process, does not sleep, and returns at once."""
    check_parameters_no_io(SEAM, polyloop_action_executor)


def test_parameters_are_stable_and_hold_no_secrets(
    polyloop_action_executor: ActionExecutor,
) -> None:
    """parameters() answers the same twice and names no credential."""
    check_parameters_stable_no_secrets(SEAM, polyloop_action_executor)
