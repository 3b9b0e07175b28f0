"""Listening for the store's writes: ``LISTEN`` on the store's channel (design 0069).

The schema's trigger notifies, in the writing transaction, the hex ``run_key`` of each run a
statement wrote (``_schema``). A listener has its own connection, which does nothing but
listen: the event loop watches its socket (no thread), and each readable moment takes what
libpq has received. The run_ids behind the keys are looked up by the store's readers, once
per key (a key's run_id never changes).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

import psycopg
from psycopg import sql
from psycopg.rows import TupleRow

from polyloop.errors import StoreError
from polyloop.stores.postgres._connect import StoreDatabase, connect
from polyloop.stores.postgres._schema import notify_channel

__all__ = ["listen"]

_Connection = psycopg.Connection[TupleRow]
#: Run ids remembered by key; past this many the memory starts over.
_REMEMBERED = 65_536


@contextlib.asynccontextmanager
async def listen(
    database: StoreDatabase,
    run_ids_of: Callable[[Sequence[bytes]], Awaitable[dict[bytes, str]]],
) -> AsyncIterator[AsyncIterator[str]]:
    """Listen on ``database``'s channel; yield the run_id of each run written after this
    returns. ``run_ids_of(keys)`` looks run_ids up by ``run_key``."""
    opening = asyncio.ensure_future(
        asyncio.to_thread(connect, database, application_name="polyloop listener", writing=False)
    )
    try:
        connection = await asyncio.shield(opening)
    except asyncio.CancelledError:
        # The thread goes on connecting: the connection it makes is closed, not left open.
        opening.add_done_callback(_close_opened)
        raise
    try:
        channel = sql.Identifier(notify_channel(database.schema))
        await asyncio.to_thread(connection.execute, sql.SQL("LISTEN {}").format(channel))
    except BaseException:
        connection.close()
        raise
    loop = asyncio.get_running_loop()
    arrived: asyncio.Queue[bytes | StoreError] = asyncio.Queue()
    pgconn = connection.pgconn
    socket = pgconn.socket

    def readable() -> None:
        failure: str | None = None
        try:
            pgconn.consume_input()
            while (notify := pgconn.notifies()) is not None:
                arrived.put_nowait(notify.extra)
        except psycopg.Error as error:
            failure = database.explain(error)
        if failure is None and (connection.broken or pgconn.status != psycopg.pq.ConnStatus.OK):
            failure = "the server ended the connection"
        if failure is not None:
            loop.remove_reader(socket)
            arrived.put_nowait(
                StoreError(
                    f"{database.name}: listening for writes stopped ({failure}); writes may "
                    "have been missed. Look at every run again, then listen anew."
                )
            )

    loop.add_reader(socket, readable)
    known: dict[bytes, str] = {}

    async def run_ids() -> AsyncIterator[str]:
        while True:
            batch = [await arrived.get()]
            while not arrived.empty():
                batch.append(arrived.get_nowait())
            keys: list[bytes] = []
            for item in batch:
                if isinstance(item, StoreError):
                    raise item
                try:
                    key = bytes.fromhex(item.decode("ascii"))
                except ValueError:
                    continue  # not our trigger's payload: someone else NOTIFYs on the channel
                if key not in keys:
                    keys.append(key)
            unknown = [key for key in keys if key not in known]
            if unknown:
                if len(known) + len(unknown) > _REMEMBERED:
                    known.clear()
                known.update(await run_ids_of(unknown))
            for key in keys:
                run_id = known.get(key)
                if run_id is not None:
                    yield run_id

    try:
        yield run_ids()
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(socket)
        connection.close()


def _close_opened(opening: asyncio.Future[_Connection]) -> None:
    if not opening.cancelled() and opening.exception() is None:
        opening.result().close()
