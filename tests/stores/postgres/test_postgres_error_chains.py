"""No password travels inside an error of the PostgreSQL store, not even out of sight.

``raise StoreError(...) from None`` inside ``except psycopg.Error`` kept the driver's error as
``__context__``, and its connection object holds the password; a local variable holding the
connection string rode along in the traceback. Each test provokes a refusal on the real test
server (a wrong password) or on a closed port, through a URL and through key=value text, at
every entry point, and searches everything an error reporter could send
(:func:`polyloop_contract.find_secret`: the chain, every exception's attributes, every local
variable of every traceback frame).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from polyloop.errors import StoreError
from polyloop.session import run
from polyloop.stores.postgres import PostgresRunStore
from polyloop_contract import find_secret
from tests.stores import _agent
from tests.stores._helpers import started
from tests.stores._postgres import server_url, session_prefix

pytestmark = pytest.mark.server

#: A password the test server does not know.
WRONG = f"wrong-{secrets.token_hex(8)}"


#: The refused targets' names: known without a server, so that deselecting these tests
#: (``-m "not server"``) needs none.
TARGETS = (
    "wrong password, URL",
    "wrong password, key=value",
    "closed port, URL",
    "closed port, key=value",
)


def _targets() -> dict[str, tuple[str, str]]:
    """Refused targets: (connection text, what the message must say went wrong)."""
    parts = conninfo_to_dict(server_url())
    user, database = parts["user"], parts["dbname"]
    host, port = parts["host"], parts["port"]
    targets = {
        "wrong password, URL": (
            f"postgresql://{user}:{WRONG}@{host}:{port}/{database}",
            "password authentication failed",
        ),
        "wrong password, key=value": (
            make_conninfo(server_url(), password=WRONG),
            "password authentication failed",
        ),
        "closed port, URL": (
            f"postgresql://{user}:{WRONG}@127.0.0.1:1/{database}",
            "port 1 failed",
        ),
        "closed port, key=value": (
            make_conninfo(server_url(), password=WRONG, host="127.0.0.1", port="1"),
            "port 1 failed",
        ),
    }
    assert tuple(targets) == TARGETS
    return targets


#: Every way into the store that connects: open, each read, a write, a lease, a whole run.
CALLS: dict[str, Callable[[PostgresRunStore], Awaitable[Any]]] = {
    "open": lambda store: store.open(),
    "read_log": lambda store: store.read_log("chain"),
    "list_run_ids": lambda store: store.list_run_ids(),
    "run_lease_holder": lambda store: store.run_lease_holder("chain"),
    "write_run_started": lambda store: store.write_run_started(started("chain")),
    "acquire_run_lease": lambda store: store.acquire_run_lease("chain"),
    "run": lambda store: run(_agent.definition(store, 2), _agent.request("chain", 0, 2)),
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("call", list(CALLS))
async def test_a_refused_store_raises_an_error_that_carries_no_password(
    target: str, call: str
) -> None:
    """The StoreError says what the server answered, and neither the password nor the
    connection string is anywhere in its chain, its attributes or its traceback's frames."""
    conninfo, reason = _targets()[target]
    store = PostgresRunStore(conninfo, schema=f"{session_prefix()}_chains")
    try:
        with pytest.raises(StoreError) as caught:
            await CALLS[call](store)
    finally:
        await store.aclose()
    error = caught.value
    assert reason in str(error)
    assert None is find_secret(error, (WRONG, conninfo))
    assert (None, None) == (error.__cause__, error.__context__)


async def test_the_search_finds_the_password_the_driver_error_keeps() -> None:
    """The driver's error itself does hold the password (so the search above can fail):
    psycopg keeps the connection options in its connection object."""
    import psycopg

    conninfo, _ = _targets()["wrong password, URL"]
    with pytest.raises(psycopg.OperationalError) as caught:
        await psycopg.AsyncConnection.connect(conninfo)
    where = find_secret(caught.value, (WRONG,))
    assert where is not None
    assert "pgconn" in where
