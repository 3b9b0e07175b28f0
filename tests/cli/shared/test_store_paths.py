"""Paths that are not stores: each refused with a message saying what is there and what to pass.

A SQLite store is a file with SQLite's header and the table run_records; a JSON Lines store is
a directory that is empty or holds run files named <prefix>.<sha256>.jsonl (both recognised by
content). Anything else at the path is exit 7; nothing at the path is exit 4.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from polyloop.stores.sqlite import SqliteRunStore
from tests.cli._kit import assert_one_line_error, headline, polyloop, started, write


@pytest.fixture
def etc_like(tmp_path: Path) -> Path:
    """A directory of ordinary files, like /etc."""
    directory = tmp_path / "etc"
    directory.mkdir()
    for name in ("hosts", "passwd", "resolv.conf", "shadow"):
        (directory / name).write_text("not a run\n")
    return directory


@pytest.fixture
async def demo_home(tmp_path: Path) -> Path:
    """What the demo leaves in POLYLOOP_HOME: its SQLite store and its ledger beside it."""
    home = tmp_path / "home"
    home.mkdir()
    async with SqliteRunStore(home / "demo.sqlite") as store:
        await write(store, [started("demo-run")])
    (home / "demo-ledger.jsonl").write_text('{"run_id": "demo-run", "tool": "x", "pid": 1}\n')
    return home


@pytest.mark.parametrize("form", ["{path}", "jsonl://{path}"])
def test_a_directory_of_other_files_is_not_a_jsonl_store(
    etc_like: Path, env: dict[str, str], form: str
) -> None:
    """`--store /etc` (bare or jsonl:) says it holds no run files, naming what it holds."""
    result = polyloop("runs", "--store", form.format(path=etc_like), env=env)
    assert_one_line_error(result, 7)
    assert headline(result).startswith(
        f"{etc_like} is not a JSON Lines store: it holds no run files (named "
        "<prefix>.<sha256>.jsonl) but 4 other entries (hosts, passwd, resolv.conf, …)"
    )


def test_the_demos_own_folder_points_at_the_sqlite_file_in_it(
    demo_home: Path, env: dict[str, str]
) -> None:
    """`--store .polyloop` is not taken as a jsonl store: the message names the SQLite file."""
    result = polyloop("runs", "--store", str(demo_home), env=env)
    assert_one_line_error(result, 7)
    assert headline(result).endswith(
        f"it holds a SQLite file: pass --store sqlite://{demo_home / 'demo.sqlite'}."
    )
    assert "demo-ledger.jsonl" in result.stderr


def test_sqlite_url_of_a_directory_says_it_is_a_directory(
    demo_home: Path, env: dict[str, str]
) -> None:
    """`--store sqlite:///a/directory` says it is a directory, not that no store exists."""
    result = polyloop("runs", "--store", f"sqlite://{demo_home}", env=env)
    assert_one_line_error(result, 7)
    assert headline(result).startswith(f"{demo_home} is a directory, not a SQLite store")
    assert "polyloop demo" not in result.stderr


def test_jsonl_url_of_a_sqlite_file_names_the_right_url(
    demo_home: Path, env: dict[str, str]
) -> None:
    """`jsonl://` of a SQLite file: a file, not a directory, and the sqlite:// URL to use."""
    path = demo_home / "demo.sqlite"
    result = polyloop("runs", "--store", f"jsonl://{path}", env=env)
    assert_one_line_error(result, 7)
    assert headline(result).endswith(f"it is a SQLite database: use --store sqlite://{path}.")


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", "is an empty file, not a SQLite store"),
        (b"root:x:0:0:root:/root:/bin/bash\n", "is not a SQLite database (no SQLite header)"),
        (None, "is a SQLite database but not a PolyLoop store (it has no run_records table)"),
    ],
)
def test_files_that_are_not_sqlite_stores(
    tmp_path: Path, env: dict[str, str], content: bytes | None, says: str
) -> None:
    """An empty file, a text file, a SQLite database of something else: each named for what it is."""
    path = tmp_path / "file.sqlite"
    if content is None:
        with sqlite3.connect(path) as connection:
            connection.execute("CREATE TABLE accounts (id INTEGER)")
        connection.close()
    else:
        path.write_bytes(content)
    result = polyloop("runs", "--store", f"sqlite://{path}", env=env)
    assert_one_line_error(result, 7)
    assert headline(result).startswith(f"{path} {says}")


def test_an_empty_directory_is_an_empty_store(tmp_path: Path, env: dict[str, str]) -> None:
    """An empty directory is a JSON Lines store with no runs yet: exit 0."""
    result = polyloop("runs", "--store", f"jsonl://{tmp_path}", env=env)
    assert (0, "") == (result.code, result.stderr)
    assert result.stdout.startswith(f"No runs in jsonl://{tmp_path}.")


def test_a_path_where_nothing_is_says_which_part_is_missing(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Nothing at the path: exit 4, naming the missing directory when that is what is missing."""
    result = polyloop("runs", "--store", f"sqlite://{tmp_path}/no/such.sqlite", env=env)
    assert_one_line_error(result, 4)
    assert f"(the directory {tmp_path}/no does not exist)" in result.stderr


def test_the_demo_refuses_to_write_its_store_into_a_folder_of_other_files(
    etc_like: Path, env: dict[str, str]
) -> None:
    """`demo --store jsonl:///etc` writes nothing there and asks for an empty or new directory."""
    before = sorted(path.name for path in etc_like.iterdir())
    result = polyloop("demo", "--store", f"jsonl://{etc_like}", env=env)
    assert_one_line_error(result, 7)
    assert headline(result).endswith("choose an empty or new directory for the demo's store.")
    assert "" == result.stdout
    assert before == sorted(path.name for path in etc_like.iterdir())
    assert not (etc_like.parent / "etc-ledger.jsonl").exists()
