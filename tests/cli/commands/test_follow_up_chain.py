"""``polyloop runs`` and ``polyloop show`` show a conversation's chain of follow-up runs
(design 0052)."""

from __future__ import annotations

from pathlib import Path

from polyloop.session import follow_up, run
from polyloop.stores.sqlite import SqliteRunStore
from tests.cli._kit import polyloop
from tests.loop_kit import make_definition, make_request, replies


async def _conversation(store: SqliteRunStore) -> None:
    """``c-1`` answers; ``c-2`` follows it, ``c-3`` follows ``c-2``."""
    await run(make_definition(replies("FINAL: one"), store), make_request("c-1"))
    await follow_up(
        make_definition(replies("FINAL: two"), store), "c-1", make_request("c-2"), "and then?"
    )
    await follow_up(
        make_definition(replies("FINAL: three"), store), "c-2", make_request("c-3"), "thanks"
    )


async def test_runs_lists_which_run_each_follow_up_follows(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """`runs --json` carries follows_run_id on every row; the table gains a FOLLOWS column."""
    await _conversation(sqlite_store)
    url = f"sqlite://{sqlite_path}"
    listed = polyloop("runs", "--store", url, "--json", env=env)
    assert 0 == listed.code, listed.stderr
    follows = {row["run_id"]: row["follows_run_id"] for row in listed.json()["runs"]}
    assert {"c-1": None, "c-2": "c-1", "c-3": "c-2"} == follows
    table = polyloop("runs", "--store", url, env=env).stdout
    assert "FOLLOWS" in table
    assert any(
        line.split()[0] == "c-3" and line.split()[-1] == "c-2"
        for line in table.splitlines()
        if line.split()
    )


async def test_runs_without_follow_ups_has_no_follows_column(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """A store of plain runs lists them exactly as before: no FOLLOWS column."""
    await run(make_definition(replies("FINAL: one"), sqlite_store), make_request("solo"))
    table = polyloop("runs", "--store", f"sqlite://{sqlite_path}", env=env).stdout
    assert "solo" in table
    assert "FOLLOWS" not in table


async def test_show_names_the_chain_and_the_users_input(
    sqlite_store: SqliteRunStore, sqlite_path: Path, env: dict[str, str]
) -> None:
    """`show c-3` says which run it follows, its turn in the chain and the input it began with."""
    await _conversation(sqlite_store)
    url = f"sqlite://{sqlite_path}"
    text = polyloop("show", "c-3", "--store", url, env=env)
    assert 0 == text.code, text.stderr
    assert "c-2 (turn 3: c-1 → c-2 → c-3)" in text.stdout
    assert "thanks" in text.stdout
    document = polyloop("show", "c-3", "--store", url, "--json", env=env).json()
    assert (["c-1", "c-2", "c-3"], "c-2", "thanks") == (
        document["conversation"],
        document["follows_run_id"],
        document["queued_input"],
    )
    first = polyloop("show", "c-1", "--store", url, "--json", env=env).json()
    assert (["c-1"], None, None) == (
        first["conversation"],
        first["follows_run_id"],
        first["queued_input"],
    )
