"""The stores' layout is known in one place: the schema and naming modules of ``polyloop-stores``.

``polyloop.stores.salvage`` reads a damaged file store's storage directly, so it must follow the
layout the stores write: it is built on the SQLite schema's constants and on the JSON Lines
file-name rule, and no other distribution spells either.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from polyloop.stores import _sqlite_schema
from polyloop.stores._naming import file_name_for, is_run_file_name, lease_name_for
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.stores.salvage import (
    has_records_table,
    list_from_layout,
    salvage_jsonl,
    salvage_sqlite,
    starts_like_sqlite,
)
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import write_records
from tests.stores._helpers import noop_step, started

_PACKAGES = Path(__file__).resolve().parents[2] / "packages"
_STORES = _PACKAGES / "polyloop-stores" / "src" / "polyloop" / "stores"


def _sources() -> dict[Path, str]:
    return {path: path.read_text("utf-8") for path in sorted(_PACKAGES.glob("*/src/**/*.py"))}


def test_the_sqlite_layout_names_have_one_copy() -> None:
    """The records table's index and the table itself are spelled in the schema module only,
    outside the store that executes the schema's own statements."""
    index = _sqlite_schema.RECORDS_BY_RUN_INDEX
    spelled = [path for path, text in _sources().items() if index in text]
    assert spelled == [_STORES / "_sqlite_schema.py"]
    table = re.compile(rf"\b{_sqlite_schema.RECORDS_TABLE}\b")
    outside = [
        path
        for path, text in _sources().items()
        if table.search(text) and not path.is_relative_to(_STORES)
    ]
    assert outside == [], f"modules outside polyloop-stores that spell the SQLite table: {outside}"


def test_no_distribution_but_the_stores_rebuilds_the_run_file_name_rule() -> None:
    """A regex of the JSON Lines file names lives only beside the function that makes them."""
    rule = re.compile(r"\[0-9a-f\]\{\{?64\}?\}")
    spelled = [path for path, text in _sources().items() if rule.search(text)]
    assert spelled == [_STORES / "_naming.py"]


@given(st.text(max_size=300).filter(lambda s: s.encode("utf-8", "ignore").decode() == s))
def test_every_run_file_name_is_recognised_and_no_lease_name_is(run_id: str) -> None:
    assert is_run_file_name(file_name_for(run_id))
    assert not is_run_file_name(lease_name_for(run_id))


async def test_the_layout_readers_read_what_the_stores_wrote(tmp_path: Path) -> None:
    sqlite_path = tmp_path / "s.sqlite"
    jsonl_dir = tmp_path / "runs"
    for store in (SqliteRunStore(sqlite_path), JsonlRunStore(jsonl_dir)):
        for run_id in ("run-b", "run-a"):
            await write_records(store, (started(run_id), *noop_step(run_id, 0).records))
        store.close()

    assert starts_like_sqlite(sqlite_path)
    assert has_records_table(sqlite_path)
    assert not starts_like_sqlite(jsonl_dir / file_name_for("run-a"))
    assert list(list_from_layout("sqlite", sqlite_path).run_ids) == ["run-b", "run-a"]
    assert sorted(list_from_layout("jsonl", jsonl_dir).run_ids) == ["run-a", "run-b"]

    from_sqlite = salvage_sqlite(sqlite_path, "run-a")
    from_jsonl = salvage_jsonl(jsonl_dir / file_name_for("run-a"), "run-a")
    assert from_sqlite.unreadable == ()
    assert from_jsonl.unreadable == ()
    assert from_sqlite.log == from_jsonl.log == await SqliteRunStore(sqlite_path).read_log("run-a")
