"""The cancellation rule shared by the seams whose calls await: cancellation passes through."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from polyloop_contract._checks import CALL_TIMEOUT, Rule


async def check_cancellation_passes_through(
    seam: str, what: str, coroutine: Coroutine[Any, Any, object]
) -> None:
    """Cancel ``coroutine`` while it is in flight; it must end cancelled, not swallow it."""
    rule = Rule(seam, "cancellation passes through")
    task = asyncio.ensure_future(coroutine)
    await asyncio.sleep(0)
    requested = task.cancel()
    try:
        done, _ = await asyncio.wait({task}, timeout=CALL_TIMEOUT)
    finally:
        if not task.done():
            task.cancel()
    rule.check(bool(done), f"{what} did not end within {CALL_TIMEOUT:g} s of being cancelled")
    if not requested or task.cancelled():
        return  # it finished before the cancellation arrived, or it ended cancelled: both fine
    error = task.exception()
    rule.fail(
        f"{what} was cancelled while in flight but "
        + (
            f"raised {type(error).__name__}: {error}"
            if error is not None
            else f"returned {task.result()!r}"
        )
        + "; let asyncio.CancelledError propagate so the run can record 'cancelled'"
    )
