"""The console on a PostgreSQL store whose URL holds a password: the password is on no page,
in no response header and in none of the server's output (design 0068). The server is the
one of ``POLYLOOP_TEST_POSTGRES_URL`` (the throwaway cluster, whose URL has a password)."""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from polyloop.stores.postgres import PostgresRunStore
from polyloop.types import ReplayPolicy, StopReason
from tests.cli._kit import finished, started, tool_step, tool_step_records, write
from tests.cli.shared.test_postgres_store import password_of, with_schema
from tests.console._kit import serve, signed_in
from tests.stores._postgres import drop_schemas, server_url

pytestmark = [pytest.mark.server, pytest.mark.slow]

RUN = "pg-console-run"


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = f"plt_console_{secrets.token_hex(4)}"
    store = PostgresRunStore(server_url(), schema=name)
    try:
        await write(  # type: ignore[arg-type]
            store,
            [
                started(RUN),
                *tool_step_records(RUN, 0, "lookup", ReplayPolicy.SAFE),
                finished(RUN, StopReason.TASK_COMPLETED, [tool_step(0, "lookup")]),
            ],
        )
        yield name
    finally:
        await store.aclose()
        drop_schemas([name])


def test_no_page_shows_the_store_password(schema: str, tmp_path: Path) -> None:
    url = with_schema(server_url(), schema)
    password = password_of(url)
    forms = {password, urllib.parse.quote(password, safe="")}
    served = serve(tmp_path / "home", url)
    seen: list[str] = []
    try:
        assert served.token is not None
        # Not a file store: the token is kept in POLYLOOP_HOME.
        assert (tmp_path / "home" / "console-token").exists()
        with signed_in(served) as client:
            for path in ("/login", "/", "/runs", f"/runs/{RUN}", "/runs/no-such-run"):
                answer = client.get(path)
                seen.append(answer.text + str(answer.headers))
            assert RUN in seen[2]
            assert "@" in seen[1]
            assert "schema=" in seen[1]
    finally:
        served.stop()
    seen += [served.stdout.read_text(), served.audit()]
    assert [] == [form for form in forms for text in seen if form in text]
