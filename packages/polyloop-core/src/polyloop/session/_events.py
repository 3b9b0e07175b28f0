"""Delivery of events to the sink: bounded, counted, never fatal, never re-emitted."""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Coroutine, Generator
from typing import Any

from polyloop.ports import Event, EventSink

__all__ = ["EventChannel"]

logger = logging.getLogger("polyloop")

#: After this many timeouts in a row the sink is considered hung for the rest of the invocation.
HUNG_AFTER_TIMEOUTS = 3


@types.coroutine
def _rest_of(coroutine: Coroutine[Any, Any, Any], pending: Any) -> Generator[Any, Any, None]:
    """Await the remainder of a coroutine that already suspended once on ``pending``."""
    while True:
        try:
            sent = yield pending
        except BaseException as error:
            try:
                pending = coroutine.throw(error)
            except StopIteration:
                return
        else:
            try:
                pending = coroutine.send(sent)
            except StopIteration:
                return


class EventChannel:
    """Sends events to one sink for one run invocation and counts failed deliveries.

    Each delivery is bounded by ``timeout`` seconds. A sink that times out three times in a row
    is not called again during this invocation: its later events count as failures without
    waiting, so a hung sink costs a run at most about ``3 * timeout`` seconds in total.
    """

    __slots__ = ("_hung", "_run_id", "_sink", "_timeout", "_timeouts_in_a_row", "failures")

    def __init__(self, sink: EventSink, run_id: str, timeout: float) -> None:
        self._sink = sink
        self._run_id = run_id
        self._timeout = timeout
        self._timeouts_in_a_row = 0
        self._hung = False
        self.failures = 0

    async def emit(self, event: Event, *, within: float | None = None) -> bool:
        """Deliver ``event``; return whether it was delivered. Failures are logged and counted."""
        if self._hung:
            self.failures += 1
            return False
        limit = self._timeout if within is None else min(within, self._timeout)
        try:
            # Fast path: most sinks finish without suspending, and then no timer is needed.
            # Only a sink that suspends gets the rest of its delivery bounded by the timeout.
            coroutine = self._sink.emit(event)
            try:
                pending = coroutine.send(None)
            except StopIteration:
                self._timeouts_in_a_row = 0
                return True
            async with asyncio.timeout(limit):
                await _rest_of(coroutine, pending)
        except TimeoutError:
            self.failures += 1
            self._timeouts_in_a_row += 1
            logger.warning(
                "polyloop: event sink did not take %s event of run %r within %.3g s",
                event.kind.value,
                self._run_id,
                limit,
            )
            if self._timeouts_in_a_row >= HUNG_AFTER_TIMEOUTS:
                self._hung = True
                logger.error(
                    "polyloop: event sink timed out %d times in a row; no further events of run "
                    "%r are sent to it in this invocation",
                    self._timeouts_in_a_row,
                    self._run_id,
                )
            return False
        except Exception as error:
            self.failures += 1
            self._timeouts_in_a_row = 0
            logger.warning(
                "polyloop: event sink failed on %s event of run %r: %s: %s",
                event.kind.value,
                self._run_id,
                type(error).__name__,
                error,
            )
            return False
        self._timeouts_in_a_row = 0
        return True
