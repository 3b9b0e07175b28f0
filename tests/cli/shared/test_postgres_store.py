"""Every command takes ``--store postgresql://…`` (or ``postgres://``), on a real server, and
never prints the URL's password: not in tables, not in ``--json``, not in errors, not in the
commands it suggests.

The server is the one named by ``POLYLOOP_TEST_POSTGRES_URL`` (``scripts/test.sh`` starts a
throwaway cluster); its URL must carry a password, which these tests then look for in every
byte the command prints.
"""

from __future__ import annotations

import secrets
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from psycopg import sql

from polyloop.stores.postgres import PostgresRunStore
from polyloop.types import ReplayPolicy, StopReason
from tests.cli._kit import (
    Completed,
    assert_one_line_error,
    finished,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)
from tests.stores._postgres import admin, drop_schemas, server_url

pytestmark = pytest.mark.server

RUN = "pg-run"


def password_of(url: str) -> str:
    password = urllib.parse.urlsplit(url).password
    if not password:
        pytest.fail(
            "these tests look for the server's password in the command's output, so "
            "POLYLOOP_TEST_POSTGRES_URL must hold one (the throwaway cluster's does)",
            pytrace=False,
        )
    return password


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    """A schema of the test server holding one finished run, dropped afterwards."""
    name = f"plt_cli_{secrets.token_hex(4)}"
    store = PostgresRunStore(server_url(), schema=name)
    try:
        steps = [tool_step(0, "lookup"), tool_step(1, "close")]
        await write(  # type: ignore[arg-type]
            store,
            [
                started(RUN),
                *tool_step_records(RUN, 0, "lookup", ReplayPolicy.SAFE),
                *tool_step_records(RUN, 1, "close", ReplayPolicy.NEVER),
                finished(RUN, StopReason.TASK_COMPLETED, steps),
            ],
        )
        yield name
    finally:
        await store.aclose()
        drop_schemas([name])


def with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def assert_no_password(password: str, *results: Completed) -> None:
    """Neither the password nor its percent-encoded form is in any output."""
    forms = {password, urllib.parse.quote(password, safe="")}
    printed = [(form, result.stdout + result.stderr) for result in results for form in forms]
    assert [] == [form for form, text in printed if form in text]


def test_runs_lists_a_postgres_store_by_a_url_it_prints_without_the_password(
    schema: str, env: dict[str, str]
) -> None:
    """runs --json names the store by its URL minus the password; the table shows the run."""
    url = with_schema(server_url(), schema)
    password = password_of(url)
    listed = polyloop("runs", "--store", url, "--json", env=env)
    assert [RUN] == [row["run_id"] for row in listed.json()["runs"]]
    assert url.replace(f":{password}@", "@") == listed.json()["store"]
    table = polyloop("runs", "--store", url, env=env)
    assert (0, True) == (table.code, RUN in table.stdout)
    assert_no_password(password, listed, table)


@pytest.mark.slow
def test_every_command_reads_a_postgres_store_and_never_prints_its_password(
    schema: str, env: dict[str, str]
) -> None:
    """runs, show, plan, verify (one and all) and export, in text and JSON, on postgresql://
    and postgres:// URLs: the run is there, the password is nowhere."""
    url = with_schema(server_url(), schema)
    password = password_of(url)
    alias = url.replace("postgresql://", "postgres://", 1)
    results = []
    for store in (url, alias):
        for json_flag in ((), ("--json",)):
            for command in (("runs",), ("show", RUN), ("plan", RUN), ("verify", RUN)):
                result = polyloop(*command, "--store", store, *json_flag, env=env)
                assert (command, 0) == (command, result.code), result.stderr
                results.append(result)
        results.append(polyloop("verify", "--all", "--store", store, env=env))
        results.append(polyloop("export", RUN, "--store", store, env=env))
    assert 2 == len(results[-1].stdout.splitlines())  # export: one line per step
    assert_no_password(password, *results)


def test_errors_name_the_server_but_not_the_password(schema: str, env: dict[str, str]) -> None:
    """A wrong password and a closed port are exit 7 (host and user named, no password); an
    unknown run is exit 5, suggesting a command whose URL has no password."""
    url = with_schema(server_url(), schema)
    password = password_of(url)
    wrong = url.replace(f":{password}@", f":{password}x@", 1)
    refused = polyloop("runs", "--store", wrong, env=env)
    assert_one_line_error(refused, 7)
    assert "127.0.0.1" in refused.stderr or "localhost" in refused.stderr
    parts = urllib.parse.urlsplit(url)
    closed = url.replace(f"{parts.hostname}:{parts.port}", f"{parts.hostname}:1", 1)
    unreachable = polyloop("show", RUN, "--store", closed, "--json", env=env)
    assert 7 == unreachable.code
    missing = polyloop("plan", "no-such-run", "--store", url, env=env)
    assert_one_line_error(missing, 5)
    assert f"--store '{url.replace(f':{password}@', '@')}'" in missing.stderr
    assert_no_password(password, refused, unreachable, missing)
    assert_no_password(f"{password}x", refused)


def test_a_corrupt_row_is_exit_6_and_the_other_runs_are_still_verified(
    schema: str, env: dict[str, str]
) -> None:
    """An undecodable row of a postgres store is that run's corruption (exit 6, naming the
    row); verify --all goes on to the others."""
    url = with_schema(server_url(), schema)
    with admin() as connection:
        connection.execute(
            sql.SQL(
                "INSERT INTO {} (run_key, kind, record_key, run_id, body) "
                "SELECT sha256(convert_to('bad', 'UTF8')), 'run_started', '', "
                "convert_to('bad', 'UTF8'), '\\xff'::bytea"
            ).format(sql.Identifier(schema, "run_records"))
        )
    result = polyloop("verify", "--all", "--store", url, "--json", env=env)
    assert 6 == result.code
    assert [("bad", False), (RUN, True)] == sorted(
        (run["run_id"], run["ok"]) for run in result.json()["runs"]
    )
    assert "seq" in next(run["problem"] for run in result.json()["runs"] if not run["ok"])


@pytest.mark.slow
def test_the_demo_runs_on_a_postgres_store(tmp_path: Path, env: dict[str, str]) -> None:
    """`polyloop demo --store postgresql://…` kills and resumes its runs there, and prints no
    password (the worker gets the URL in its environment, not its arguments)."""
    name = f"plt_cli_{secrets.token_hex(4)}"
    url = with_schema(server_url(), name)
    password = password_of(url)
    try:
        result = polyloop("demo", "--store", url, "--json", env=env, cwd=tmp_path, timeout=180)
        assert 0 == result.code, result.stderr
        document = result.json()
        assert ["task_completed", "resume_state_unknown"] == [
            run["stop_reason"] for run in document["runs"]
        ]
        listed = polyloop("runs", "--store", url, "--json", env=env)
        assert 2 == len(listed.json()["runs"])
        assert_no_password(password, result, listed)
    finally:
        drop_schemas([name])


def test_a_url_echoed_by_a_usage_error_loses_its_password(env: dict[str, str]) -> None:
    """A store URL given without --store is echoed by click as an extra argument: the line
    printed keeps user and host, not the password (nor a libpq password= value)."""
    result = polyloop("runs", "postgresql://runner:hunter2@db-1/runs", env=env)
    assert_one_line_error(result, 2)
    assert ("postgresql://runner@db-1/runs" in result.stderr, "hunter2" in result.stderr) == (
        True,
        False,
    )
    keyword = polyloop("runs", "host=db-1 password=hunter2", env=env)
    assert_one_line_error(keyword, 2)
    assert "hunter2" not in keyword.stderr
