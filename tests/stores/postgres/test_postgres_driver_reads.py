"""A run's driver reads through the session that holds the run's lease (design 0056): no
second connection, the same log a reader connection gives, and every read-time check kept.

Against the real server named by ``POLYLOOP_TEST_POSTGRES_URL``, each test in a schema of its
own.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from psycopg import sql

from polyloop.errors import CorruptLogError
from polyloop.stores.postgres import PostgresRunStore
from tests.stores._helpers import write_run
from tests.stores._postgres import admin

pytestmark = pytest.mark.server


@pytest.fixture
def store(postgres_stores: Callable[..., PostgresRunStore]) -> PostgresRunStore:
    return postgres_stores()


def _sessions_on(schema: str, application_name: str) -> int:
    """Server sessions whose last query named ``schema`` (other xdist workers share it)."""
    with admin() as connection:
        row = connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s "
            "AND pid <> pg_backend_pid() AND strpos(query, %s) > 0",
            (application_name, schema),
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_a_leased_run_is_read_without_a_reader_connection_and_reads_the_same(
    postgres_stores: Callable[..., PostgresRunStore],
) -> None:
    writer = postgres_stores()
    expected = await write_run(writer, "r", 3)
    await writer.aclose()
    driver = postgres_stores()  # the same schema, sessions of its own
    lease = await driver.acquire_run_lease("r")
    try:
        assert expected == await driver.read_log("r")
        assert 0 == _sessions_on(driver.schema, "polyloop reader")
        assert 1 == _sessions_on(driver.schema, "polyloop %")  # the writing session read it
    finally:
        await lease.release()
    # Without the lease the same log comes through a reader connection.
    assert expected == await driver.read_log("r")
    assert 1 == _sessions_on(driver.schema, "polyloop reader")
    await driver.aclose()


async def test_a_row_altered_outside_the_store_is_refused_on_the_leased_path_too(
    store: PostgresRunStore,
) -> None:
    await write_run(store, "r", 2)
    with admin() as connection:
        connection.execute(
            sql.SQL(
                "UPDATE {} SET body = 'not json' "
                "WHERE kind = 'intent' AND record_key = 'model_call:model-0'"
            ).format(sql.Identifier(store.schema, "run_records"))
        )
    lease = await store.acquire_run_lease("r")
    try:
        with pytest.raises(CorruptLogError, match=r"run_records seq \d+: not a valid log record"):
            await store.read_log("r")
    finally:
        await lease.release()


async def test_a_leased_read_whose_session_the_server_ended_still_reads(
    store: PostgresRunStore,
) -> None:
    """Reads are not fenced: when the session holding the lease is gone, the read goes through
    a reader connection and returns the log (the writes of that run fail, see 0030)."""
    expected = await write_run(store, "r", 1)
    lease = await store.acquire_run_lease("r")
    with admin() as connection:
        connection.execute(
            "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity "
            "WHERE application_name LIKE 'polyloop %%' AND application_name <> 'polyloop reader' "
            "AND pid <> pg_backend_pid() AND strpos(query, %s) > 0",
            (store.schema,),
        )
    assert expected == await store.read_log("r")
    await lease.release()
