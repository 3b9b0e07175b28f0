"""Store URLs (``polyloop.stores.urls``): the shipped schemes open their stores through the
entry-point group, and the shown form of any URL holds none of its secrets."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from polyloop.errors import ConfigurationError
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.stores.urls import (
    local_store_path,
    open_store_url,
    shown_url,
    url_scheme,
    url_secrets,
)

#: Where ``sqlite:relative/runs.db`` points from the directory the tests run in.
RELATIVE_DB = os.path.abspath("relative/runs.db")


async def test_each_shipped_scheme_opens_its_store(tmp_path: Path) -> None:
    """sqlite:, jsonl:, postgresql: and postgres: URLs open the store they name, lazily (no
    file, no connection), with the path or schema the URL gives."""
    opened = [
        open_store_url(f"sqlite://{tmp_path}/runs.db"),
        open_store_url("SQLite:relative/runs.db"),
        open_store_url(f"jsonl://{tmp_path}/runs"),
        open_store_url("postgresql://runner:pw@db-1:5433/experiments?schema=dissect"),
        open_store_url("postgres://runner@db-1/experiments?sslmode=disable"),
    ]
    try:
        assert [
            SqliteRunStore,
            SqliteRunStore,
            JsonlRunStore,
            PostgresRunStore,
            PostgresRunStore,
        ] == [type(store) for store in opened]
        assert [
            f"{tmp_path}/runs.db",
            RELATIVE_DB,
            f"{tmp_path}/runs",
            "experiments/dissect",
            "experiments/polyloop",
        ] == [_location(store) for store in opened]
        assert [
            {"kind": kind} for kind in ("sqlite", "sqlite", "jsonl", "postgres", "postgres")
        ] == [dict(store.parameters()) for store in opened]
        assert [] == os.listdir(tmp_path)
    finally:
        for store in opened:
            await store.aclose()  # type: ignore[attr-defined]


def _location(store: object) -> str:
    """Where a store keeps its logs (not in its parameters: design 0040)."""
    if isinstance(store, SqliteRunStore):
        return store.path
    if isinstance(store, JsonlRunStore):
        return store.directory
    assert isinstance(store, PostgresRunStore)
    return f"{store.database}/{store.schema}"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://db/x", "no installed store opens 'mysql://db/x'"),
        ("sqlite://host/x.db", "names a host"),
        ("jsonl:", "has no usable path"),
        ("postgresql:db", "is not a PostgreSQL URL"),
        ("nothing-here", "no installed store opens"),
    ],
)
def test_a_url_no_store_can_use_is_a_configuration_error_saying_why(url: str, message: str) -> None:
    """Unknown schemes, host parts of file URLs, missing paths and malformed PostgreSQL URLs
    are refused before any I/O."""
    with pytest.raises(ConfigurationError, match=message):
        open_store_url(url)


def test_a_password_in_a_refused_url_is_not_repeated() -> None:
    """The refusal of an unknown scheme names the URL without its password."""
    with pytest.raises(ConfigurationError) as refused:
        open_store_url("mysql://user:hunter2@db/x")
    assert ("hunter2" in str(refused.value), "mysql://user@db/x" in str(refused.value)) == (
        False,
        True,
    )


def test_file_urls_name_absolute_paths_after_two_slashes_and_relative_ones_without() -> None:
    """``sqlite:///abs`` is absolute, ``sqlite:rel`` relative; a drive letter is no scheme."""
    assert [Path("/abs/x.db"), Path("rel/x.db")] == [
        local_store_path("sqlite:///abs/x.db"),
        local_store_path("sqlite:rel/x.db"),
    ]
    assert [None, None, "sqlite", "postgresql"] == [
        url_scheme("C:/runs"),
        url_scheme("runs/a:b"),
        url_scheme("SQLite:x"),
        url_scheme(" postgresql://h/d"),
    ]


def test_the_shown_form_drops_the_password_and_secret_parameters_only() -> None:
    """User, host, port, database and harmless parameters stay; secrets go."""
    url = "postgresql://runner:pa%40ss@db-1:5433/runs?sslmode=require&password=q&api_key=k#x"
    assert "postgresql://runner@db-1:5433/runs?sslmode=require#x" == shown_url(url)
    assert ("pa%40ss", "pa@ss", "k", "q") == url_secrets(url)
    assert "sqlite:///a/b.db" == shown_url("sqlite:///a/b.db")


_TEXT = st.text(
    alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=30,
)


@given(user=_TEXT, password=_TEXT, host=st.sampled_from(["db", "10.0.0.1:5432", "[::1]"]))
def test_no_password_survives_in_the_shown_form(user: str, password: str, host: str) -> None:
    """Whatever the user name and password (percent-encoded as a URL requires), the shown form
    holds neither the encoded nor the decoded password, and keeps the user and host."""
    encoded = urllib.parse.quote(password, safe="")
    url = f"postgresql://{urllib.parse.quote(user, safe='')}:{encoded}@{host}/runs"
    shown = shown_url(url)
    assert f"postgresql://{urllib.parse.quote(user, safe='')}@{host}/runs" == shown
    assert {encoded, password} <= set(url_secrets(url))
