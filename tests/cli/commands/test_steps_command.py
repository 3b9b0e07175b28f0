"""`polyloop steps`: the table file read back with pandas, polars and DuckDB is the records,
field by field, in each format; a damaged store gives what it can and says what it could not.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import math
import tempfile
from pathlib import Path
from typing import Any

import duckdb
import pandas
import polars
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from polyloop import testing
from polyloop.ports import RunLog
from polyloop.serialization import to_dict
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.stores.step_table import column_type, is_key_column, step_columns, step_rows_of
from polyloop.types import RunStarted, StepCompleted, StepRecord
from polyloop_cli.commands.steps import write_rows
from tests import strategies
from tests.cli._kit import assert_one_line_error, headline, polyloop
from tests.cli.shared.test_damaged_stores import RUNS as DAMAGED_RUNS
from tests.cli.shared.test_damaged_stores import STEPS as DAMAGED_STEPS
from tests.cli.shared.test_damaged_stores import (
    damaged_sqlite,  # noqa: F401  (a fixture)
    short,
)
from tests.table_kit import KEY_COLUMNS, expected_rows, fill

COLUMNS = step_columns(KEY_COLUMNS)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    path = tmp_path / "runs.sqlite"

    async def make() -> None:
        async with SqliteRunStore(path) as store:
            await fill(store)

    asyncio.run(make())
    return f"sqlite://{path}"


def _plain(value: Any) -> Any:
    """A value read back, as Python: NaN/NA/NaT are ``None``, numpy scalars Python's."""
    if value is None or value is pandas.NA:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


def _csv_form(row: dict[str, Any]) -> dict[str, Any]:
    """What CSV can say of a row: an empty cell is ``None`` and the empty string alike."""
    return {key: None if value == "" else value for key, value in row.items()}


def _pandas(path: Path, fmt: str) -> list[dict[str, Any]]:
    # The usage.<key> columns are whole numbers with gaps: pandas' nullable dtypes keep them
    # whole (its default NumPy dtypes would make them floats).
    if fmt == "parquet":
        frame = pandas.read_parquet(path, dtype_backend="numpy_nullable")
    elif fmt == "jsonl":
        frame = pandas.read_json(path, lines=True, dtype=False)
        usage = [column for column in COLUMNS if column.startswith("usage.")]
        frame[usage] = frame[usage].astype("Int64")
    else:
        kinds = {column: column_type(column).kind for column in COLUMNS}
        frame = pandas.read_csv(
            path,
            dtype={
                column: {"str": "string", "int": "Int64", "bool": "boolean"}[kind]
                for column, kind in kinds.items()
            },
            keep_default_na=False,
            na_values={column: [""] for column in COLUMNS},
        )
    assert list(COLUMNS) == list(frame.columns)
    return [{key: _plain(value) for key, value in row.items()} for row in frame.to_dict("records")]


def _polars(path: Path, fmt: str) -> list[dict[str, Any]]:
    if fmt == "parquet":
        frame = polars.read_parquet(path)
    else:
        kinds = {"int": polars.Int64, "str": polars.String, "bool": polars.Boolean}
        schema = {column: kinds[column_type(column).kind] for column in COLUMNS}
        if fmt == "jsonl":
            # polars infers a JSON lines schema without keeping the keys' order once there are
            # this many columns, so the order is checked on the lines themselves.
            with path.open(encoding="utf-8") as lines:
                assert all(list(COLUMNS) == list(json.loads(line)) for line in lines)
            frame = polars.read_ndjson(path, schema=schema)
        else:
            frame = polars.read_csv(path, schema=schema)
    assert list(COLUMNS) == frame.columns
    return frame.to_dicts()


def _duckdb(path: Path, fmt: str) -> list[dict[str, Any]]:
    reader = {"parquet": "read_parquet(?)", "jsonl": "read_json(?)", "csv": "read_csv(?"}[fmt]
    if fmt == "csv":  # CSV has no types: name them, as for the other readers
        kinds = {"int": "BIGINT", "str": "VARCHAR", "bool": "BOOLEAN"}
        types = ", ".join(f"'{column}': '{kinds[column_type(column).kind]}'" for column in COLUMNS)
        reader += f", types = {{{types}}})"
    connection = duckdb.connect()
    try:
        relation = connection.sql(f"SELECT * FROM {reader}", params=[str(path)])
        names = [column[0] for column in relation.description]
        rows = relation.fetchall()
    finally:
        connection.close()
    assert list(COLUMNS) == names
    return [dict(zip(names, row, strict=True)) for row in rows]


READERS = {"pandas": _pandas, "polars": _polars, "duckdb": _duckdb}


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_the_table_read_back_is_the_records_field_by_field(
    store_url: str, tmp_path: Path, env: dict[str, str], fmt: str, reader: str
) -> None:
    """Every row, every column, with its type: what the reader gives is what was recorded
    (in CSV an empty string and ``None`` are one empty cell)."""
    output = tmp_path / f"steps.{fmt}"
    result = polyloop("steps", "--store", store_url, "--format", fmt, "-o", str(output), env=env)
    assert 0 == result.code, result.stderr
    assert f"wrote 6 steps of 3 runs to {output} ({fmt})." == result.stdout.strip()
    expected = expected_rows()
    rows = READERS[reader](output, fmt)
    if fmt == "csv":
        expected, rows = [_csv_form(row) for row in expected], [_csv_form(row) for row in rows]
    assert len(expected) == len(rows)
    for want, got in zip(expected, rows, strict=True):
        for column in COLUMNS:
            assert (column, want[column]) == (column, got[column])
            if want[column] is not None:
                assert type(want[column]) is type(got[column]), column


def test_parquet_columns_are_typed(store_url: str, tmp_path: Path, env: dict[str, str]) -> None:
    """The Parquet schema: int64, bool and string columns, nullable only where the field is."""
    import pyarrow.parquet as pq

    output = tmp_path / "steps.parquet"
    assert (
        0
        == polyloop(
            "steps", "--store", store_url, "--format", "parquet", "-o", str(output), env=env
        ).code
    )
    schema = pq.read_schema(output)
    arrow = {"int": "int64", "str": "string", "bool": "bool"}
    assert [
        (column, arrow[column_type(column).kind], column_type(column).nullable)
        for column in COLUMNS
    ] == [(field.name, str(field.type), field.nullable) for field in schema]


def test_named_runs_only(store_url: str, tmp_path: Path, env: dict[str, str]) -> None:
    """--run selects runs; a run the store lacks is exit 5 naming it, the others written."""
    output = tmp_path / "steps.jsonl"
    args = ("steps", "--store", store_url, "--format", "jsonl", "-o", str(output))
    result = polyloop(*args, "--run", "run-unfinished", "--json", env=env)
    assert 0 == result.code, result.stderr
    assert {"runs": 1, "rows": 2, "missing": [], "unreadable": []}.items() <= result.json().items()
    assert 2 == len(output.read_text().splitlines())
    missing = polyloop(*args, "--run", "run-finished", "--run", "nope", env=env)
    assert_one_line_error(missing, 5)
    assert headline(missing).startswith("no run 'nope' in the sqlite store")
    assert 4 == len(output.read_text().splitlines())


def test_a_damaged_store_gives_what_it_can_and_says_what_not(
    damaged_sqlite: tuple[str, set[str]],  # noqa: F811
    tmp_path: Path,
    env: dict[str, str],
) -> None:
    """Bytes overwritten in a SQLite store: every step that can be read is in the table, each
    damaged run is named with what was kept; exit 6, one line."""
    url, bad = damaged_sqlite
    output = tmp_path / "steps.parquet"
    args = ("steps", "--store", url, "--format", "parquet", "-o", str(output))
    summary = polyloop(*args, "--json", env=env)
    assert 6 == summary.code
    document = summary.json()
    assert len(bad) == len(document["unreadable"])
    assert all(any(f"run {run_id!r}:" in line for line in document["unreadable"]) for run_id in bad)
    frame = pandas.read_parquet(output)
    whole = set(DAMAGED_RUNS) - bad
    counts = frame.groupby("run_id").size().to_dict()
    assert {run_id: DAMAGED_STEPS for run_id in whole} == {
        run_id: count for run_id, count in counts.items() if run_id in whole
    }
    assert document["rows"] == len(frame)
    text = polyloop(*args, env=env)
    assert_one_line_error(text, 6)
    assert f"{len(bad)} run(s) or run file(s) could not be read whole" in headline(text)
    assert len(short(headline(text), Path(url.removeprefix("sqlite://")))) <= 200


def test_an_unwritable_output_is_one_line(
    store_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """-o in a directory that does not exist: exit 7, one line saying to choose another path."""
    output = tmp_path / "no" / "such" / "dir" / "steps.csv"
    result = polyloop("steps", "--store", store_url, "--format", "csv", "-o", str(output), env=env)
    assert_one_line_error(result, 7)
    assert "choose a writable -o path" in result.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(strategies.step_records, min_size=1, max_size=4),
    binding=st.dictionaries(strategies.short_texts, strategies.short_texts, max_size=2),
    fmt=st.sampled_from(["parquet", "jsonl", "csv"]),
)
def test_any_rows_written_read_back_the_same(
    steps: list[StepRecord], binding: dict[str, str], fmt: str
) -> None:
    """Any StepRecords (any text, any count): each format gives back every value, Parquet and
    JSON Lines exactly, CSV as text (``None`` and ``""`` one empty cell)."""
    # The table's whole numbers are 64-bit (a larger count is refused, naming run and step).
    assume(
        all(
            type(value) is not int or value < 2**63
            for step in steps
            for value in to_dict(step).values()
        )
    )
    snapshot = {f"request.model_binding.{key}": value for key, value in binding.items()}
    log = RunLog(
        started=RunStarted("r", snapshot),
        steps=tuple(StepCompleted("r", None, None, step) for step in steps),
    )
    rows = list(step_rows_of("r", log))
    columns = step_columns(key for row in rows for key in row if is_key_column(key))
    with tempfile.TemporaryFile() as target:
        write_rows(fmt, target, columns, iter(rows))
        target.seek(0)
        data = target.read()
    expected = [{column: row.get(column) for column in columns} for row in rows]
    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert expected == pq.read_table(io.BytesIO(data)).to_pylist()
    elif fmt == "jsonl":
        assert expected == [json.loads(line) for line in data.split(b"\n") if line]
    else:
        limit = csv.field_size_limit(2**31 - 1)  # Python's reader stops at 128 kB by default
        try:
            header, *lines = list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))
        finally:
            csv.field_size_limit(limit)
        assert list(columns) == header
        as_text = [
            {
                key: ""
                if value is None
                else ("true" if value else "false")
                if isinstance(value, bool)
                else str(value)
                for key, value in row.items()
            }
            for row in expected
        ]
        assert as_text == [dict(zip(header, line, strict=True)) for line in lines]


def test_a_count_beyond_64_bits_is_refused_naming_run_and_step(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A StepRecord count the table's int64 columns cannot hold: exit 2, one line naming the
    run, the step and the field, and no file."""
    step = testing.tool_step("huge", 0, prompt_chars=2**63)
    records = [testing.run_started("huge"), *step.records]
    path = tmp_path / "runs.sqlite"

    async def make() -> None:
        async with SqliteRunStore(path) as store:
            await testing.write_records(store, records)

    asyncio.run(make())
    output = tmp_path / "steps.csv"
    result = polyloop(
        "steps", "--store", f"sqlite://{path}", "--format", "csv", "-o", str(output), env=env
    )
    assert_one_line_error(result, 2)
    assert headline(result).startswith(
        f"step 0 of run 'huge' has prompt_chars = {2**63}, beyond the table's 64-bit"
    )
    assert not output.exists()


def test_csv_and_jsonl_without_an_output_go_to_stdout(
    store_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """Without -o, csv and jsonl are written to stdout, the same bytes as the file -o gets;
    parquet (binary) and --json (a summary of a file) are usage errors naming -o."""
    printed = {}
    for fmt in ("csv", "jsonl"):
        output = tmp_path / f"steps.{fmt}"
        args = ("steps", "--store", store_url, "--format", fmt)
        to_file = polyloop(*args, "-o", str(output), env=env)
        assert 0 == to_file.code, to_file.stderr
        to_stdout = polyloop(*args, env=env)
        assert 0 == to_stdout.code, to_stdout.stderr
        assert "" == to_stdout.stderr
        assert output.read_text(encoding="utf-8") == to_stdout.stdout
        printed[fmt] = to_stdout.stdout
    assert list(COLUMNS) == next(csv.reader(io.StringIO(printed["csv"])))
    assert 6 == len(printed["jsonl"].splitlines())
    for refused in (("--format", "parquet"), ("--format", "csv", "--json")):
        result = polyloop("steps", "--store", store_url, *refused, env=env)
        assert (2, "") == (result.code, result.stdout)
        assert "-o PATH" in result.stderr
    assert [] == list(tmp_path.glob(".polyloop-steps-*"))
