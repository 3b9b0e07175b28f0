"""The PostgreSQL servers the store tests use.

- The shared server: ``POLYLOOP_TEST_POSTGRES_URL`` (``scripts/test.sh`` starts a throwaway one
  when it is unset). Each storage the tests open is a schema of its own, named from the test's
  directory and a per-session prefix, and dropped after the test; whatever a child process
  created under the prefix is swept at the end of the session.
- Dedicated clusters (:class:`Cluster`), for the tests that stop and restart a server or change
  its configuration: started with ``scripts/postgres-test-cluster.sh``.

Without the variable, a test that needs the server fails saying how to start one.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from polyloop.stores.postgres import PostgresRunStore
from tests import kinds

URL_VARIABLE = "POLYLOOP_TEST_POSTGRES_URL"
PREFIX_VARIABLE = "POLYLOOP_TEST_POSTGRES_PREFIX"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "postgres-test-cluster.sh")
HOW_TO_START = (
    f"{URL_VARIABLE} is not set, and the postgres store's tests need a PostgreSQL server. "
    "Run the tests through `bash scripts/test.sh` (it starts a throwaway cluster), or start "
    'one with `dir="$(bash scripts/postgres-test-cluster.sh start)"` and `export '
    f'{URL_VARIABLE}="$(cat "$dir/url")"`, or point {URL_VARIABLE} at your own server '
    "(a postgresql:// URL of a user that may create schemas)."
)

#: Schemas this process opened stores on, dropped after each test.
USED_SCHEMAS: set[str] = set()


def session_prefix() -> str:
    """The prefix of every schema of this test session (child processes inherit it)."""
    prefix = os.environ.get(PREFIX_VARIABLE)
    if prefix is None:
        prefix = os.environ[PREFIX_VARIABLE] = f"plt_{os.getpid()}_{secrets.token_hex(3)}"
    return prefix


def claim_session_prefix() -> str:
    """The prefix for this pytest process, called once by the stores' conftest. An xdist worker
    takes one of its own: the controller's, inherited through the environment, would let one
    worker's end-of-session sweep drop the schemas another worker's test is still using."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and not os.environ.get(PREFIX_VARIABLE, "").endswith(f"_{worker}"):
        os.environ[PREFIX_VARIABLE] = f"plt_{os.getpid()}_{secrets.token_hex(3)}_{worker}"
    return session_prefix()


def server_url() -> str:
    """The shared server's URL; fails the test (or the child process) when there is none."""
    kinds.require_server_marker("PostgreSQL")
    url = os.environ.get(URL_VARIABLE)
    if not url:
        if os.environ.get("PYTEST_CURRENT_TEST") is not None:
            pytest.fail(HOW_TO_START, pytrace=False)
        raise SystemExit(HOW_TO_START)
    return url


def schema_for(where: str) -> str:
    """The schema standing for the storage directory ``where``."""
    return f"{session_prefix()}_{hashlib.sha256(where.encode()).hexdigest()[:12]}"


def open_postgres_store(where: str, **options: Any) -> PostgresRunStore:
    """A store on the shared server, in the schema standing for ``where``."""
    schema = schema_for(where)
    USED_SCHEMAS.add(schema)
    return PostgresRunStore(server_url(), schema=schema, **options)


def admin(url: str | None = None) -> psycopg.Connection[Any]:
    """A plain autocommit connection for a test's own checks and cleanup."""
    return psycopg.connect(url or server_url(), autocommit=True)


def schema_exists(schema: str, url: str | None = None) -> bool:
    with admin(url) as connection:
        found = connection.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
    return found is not None


def drop_schemas(names: set[str] | list[str], url: str | None = None) -> None:
    if not names:
        return
    with admin(url) as connection:
        for name in sorted(names):
            connection.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name))
            )


def drop_used_schemas() -> None:
    """Drop the schemas this process used in the test that just ended."""
    if USED_SCHEMAS and os.environ.get(URL_VARIABLE):
        drop_schemas(USED_SCHEMAS, os.environ[URL_VARIABLE])
    USED_SCHEMAS.clear()


def sweep_session_schemas() -> None:
    """Drop every schema of this session, including those only child processes opened."""
    if not os.environ.get(URL_VARIABLE) or PREFIX_VARIABLE not in os.environ:
        return
    pattern = session_prefix().replace("_", r"\_") + r"\_%"
    # The clean-up after the session's last test, whatever that test was: named explicitly.
    url = os.environ[URL_VARIABLE]
    with admin(url) as connection:
        names = [
            name
            for (name,) in connection.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (pattern,)
            )
        ]
    drop_schemas(names, url)


def wait_until_sessions_end(process_id: int, timeout: float = 10.0) -> None:
    """Wait until the server has ended every writing session of a (killed) process.

    A statement the process sent before it died may still commit until then; a new driver
    that takes the run's lease is after that moment by construction (design 0030).
    """
    deadline = time.monotonic() + timeout
    pattern = f"polyloop % {process_id}@%"
    with admin() as connection:
        while True:
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s", (pattern,)
            ).fetchone()
            if row == (0,):
                return
            assert time.monotonic() < deadline, f"sessions of process {process_id} outlived it"
            time.sleep(0.005)


class Cluster:
    """A throwaway PostgreSQL cluster of a test's own (``scripts/postgres-test-cluster.sh``)."""

    def __init__(self) -> None:
        done = subprocess.run(
            ["bash", SCRIPT, "start"], capture_output=True, text=True, check=False, timeout=180
        )
        if done.returncode != 0:
            pytest.fail(
                "could not start a PostgreSQL cluster of this test's own with "
                f"scripts/postgres-test-cluster.sh (install Debian's postgresql package, or run "
                f"as a user that may):\n{done.stderr}",
                pytrace=False,
            )
        self.directory = done.stdout.strip()
        with open(os.path.join(self.directory, "url")) as handle:
            self.url = handle.read().strip()

    def _script(self, command: str) -> None:
        subprocess.run(
            ["bash", SCRIPT, command, self.directory], check=True, timeout=120, capture_output=True
        )

    def pause(self) -> None:
        """Stop the server (fast shutdown: sessions are cut), keeping its data and port."""
        self._script("pause")

    def resume(self) -> None:
        """Start the stopped server again on the same port."""
        self._script("resume")

    def remove(self) -> None:
        """Stop the server and delete its directory."""
        self._script("stop")
