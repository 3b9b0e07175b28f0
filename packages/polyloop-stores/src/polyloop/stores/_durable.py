"""What the durable stores (jsonl, sqlite, postgres) share above their storage.

- Which run_ids they can hold: those with a UTF-8 form (JSON text, file names and the
  database columns all need one). A run_id with a lone surrogate is refused on write and has
  no log on read: it can never have been written.
- The five writes of :class:`~polyloop.ports.RunStore` and the two of
  :class:`~polyloop.ports.UserAsking`, each handing its record to one ``_write``: a durable store writes every record the same way, one record per stored unit
  (a line, a row), so ``write_step_completed`` is atomic by construction.
- Closing (:class:`~polyloop.ports.StoreClosing`): ``close`` blocks while writes in flight
  finish; ``aclose`` runs it on a thread, so the event loop never waits; ``async with`` opens
  the store (:meth:`DurableStore.open`) and closes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import TracebackType
from typing import Self

from polyloop.asking import (
    UserAnswered,
    UserAsked,
)
from polyloop.errors import StoreError
from polyloop.serialization import LogRecord
from polyloop.types import (
    Intent,
    ModelCallResult,
    RunFinished,
    RunStarted,
    StepCompleted,
)

__all__ = ["DurableStore", "batch_run_id", "unstorable_run_id", "utf8_of"]


def utf8_of(run_id: str) -> bytes | None:
    """The UTF-8 bytes of ``run_id``, or ``None`` when it has none (a lone surrogate)."""
    try:
        return run_id.encode("utf-8")
    except UnicodeEncodeError:
        return None


def batch_run_id(records: Sequence[LogRecord], store: str) -> str | None:
    """The one run_id of a batch (:class:`polyloop.ports.RecordBatching`), ``None`` when it is
    empty; a batch of several runs is refused before anything is stored."""
    if not records:
        return None
    run_id = records[0].run_id
    for record in records:
        if record.run_id != run_id:
            raise ValueError(
                f"{store}.write_records: the records of one call must all be of one run; got "
                f"{run_id!r} and {record.run_id!r}. Nothing was stored; write each run's "
                "records in a call of its own."
            )
    return run_id


def unstorable_run_id(shown_run_id: str) -> StoreError:
    """The refusal of a run_id without a UTF-8 form (``shown_run_id``: as messages show it)."""
    return StoreError(
        f"run_id {shown_run_id} is not valid Unicode text (it holds a lone surrogate) and "
        "cannot be stored; use a run_id made of ordinary characters."
    )


class DurableStore:
    """The surface the durable stores share; each implements ``_write`` and ``close``."""

    __slots__ = ()

    async def _write(self, record: LogRecord) -> None:
        """Store ``record`` durably before returning."""
        raise NotImplementedError

    def close(self) -> None:
        """Wait for writes in flight, then release every resource. Blocks."""
        raise NotImplementedError

    async def write_run_started(self, record: RunStarted) -> None:
        await self._write(record)

    async def write_intent(self, record: Intent) -> None:
        await self._write(record)

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        await self._write(record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        await self._write(record)

    async def write_run_finished(self, record: RunFinished) -> None:
        await self._write(record)

    async def write_user_asked(self, record: UserAsked) -> None:
        await self._write(record)

    async def write_user_answered(self, record: UserAnswered) -> None:
        await self._write(record)

    async def open(self) -> None:
        """Get ready now rather than on first use; a store with nothing to prepare does
        nothing."""

    async def aclose(self) -> None:
        """:meth:`close` on a thread, without blocking the event loop."""
        await asyncio.to_thread(self.close)

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
