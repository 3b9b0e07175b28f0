"""``polyloop steps``: every StepRecord of the selected runs as one table file (design 0047).

The rows are :class:`polyloop.stores.step_table.StepTable`'s. The model-binding and
``usage.<key>`` columns are the union of the runs' keys, known only after the last run is read, so the rows are first
spooled to a temporary file beside the output (one JSON line each) and then written in the
chosen format batch by batch: memory stays that of one run plus one batch, however many runs.

- ``parquet`` (the ``polyloop-cli[parquet]`` extra, pyarrow): typed columns, ``int64``,
  ``bool`` and ``string``, nullable as the field is;
- ``csv``: a header row; ``true``/``false`` for booleans; an empty cell for ``None`` (so in CSV
  an empty string and ``None`` read back the same);
- ``jsonl``: one JSON object per row with every column, ``null`` for ``None``.
"""

from __future__ import annotations

import asyncio
import csv
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import click
import orjson

from polyloop.errors import ConfigurationError
from polyloop.stores.step_table import (
    StepTable,
    Unreadable,
    column_type,
    is_key_column,
    step_columns,
)
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.command_kit import (
    STORE_AS_FOR_RUNS,
    json_option_saying,
    output_option,
    store_choice,
    store_option_saying,
)
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id
from polyloop_cli.shared.stores import StoreUrl, open_store

__all__ = ["FORMATS", "steps", "write_rows", "write_table"]

#: The table formats ``--format`` takes.
FORMATS = ("parquet", "csv", "jsonl")
#: Rows per Parquet row group / write batch, and the text size that ends a batch early.
BATCH_ROWS = 2048
BATCH_CHARS = 16 * 1024 * 1024


def _spooled(rows: IO[bytes]) -> Iterator[dict[str, Any]]:
    rows.seek(0)
    for line in rows:
        yield orjson.loads(line)


def _batches(rows: Iterator[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    batch: list[dict[str, Any]] = []
    chars = 0
    for row in rows:
        batch.append(row)
        chars += sum(len(value) for value in row.values() if isinstance(value, str))
        if len(batch) >= BATCH_ROWS or chars >= BATCH_CHARS:
            yield batch
            batch, chars = [], 0
    if batch:
        yield batch


def _write_jsonl(target: IO[bytes], columns: Sequence[str], rows: Iterator[dict[str, Any]]) -> None:
    for row in rows:
        target.write(orjson.dumps({column: row.get(column) for column in columns}) + b"\n")


def _csv_cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _write_csv(target: IO[bytes], columns: Sequence[str], rows: Iterator[dict[str, Any]]) -> None:
    with open(target.fileno(), "w", encoding="utf-8", newline="", closefd=False) as text:
        writer = csv.writer(text)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_csv_cell(row.get(column)) for column in columns])


def _parquet_modules() -> tuple[Any, Any]:
    try:
        import pyarrow  # type: ignore[import-untyped]  # pyarrow ships no type information
        import pyarrow.parquet  # type: ignore[import-untyped]
    except ImportError:
        raise CliError(
            ExitCode.USAGE,
            "--format parquet needs pyarrow; install it with `pip install "
            "'polyloop-cli[parquet]'`, or write --format csv or jsonl.",
        ) from None
    return pyarrow, pyarrow.parquet


def _write_parquet(
    target: IO[bytes], columns: Sequence[str], rows: Iterator[dict[str, Any]]
) -> None:
    pa, pq = _parquet_modules()
    arrow_types = {"int": pa.int64(), "str": pa.string(), "bool": pa.bool_()}
    schema = pa.schema(
        [
            pa.field(column, arrow_types[kind.kind], nullable=kind.nullable)
            for column, kind in ((column, column_type(column)) for column in columns)
        ]
    )
    with pq.ParquetWriter(target, schema) as writer:
        for batch in _batches(rows):
            arrays = [
                pa.array([row.get(column) for row in batch], schema.field(column).type)
                for column in columns
            ]
            writer.write_batch(pa.record_batch(arrays, schema=schema))


_WRITERS = {"parquet": _write_parquet, "csv": _write_csv, "jsonl": _write_jsonl}


def write_rows(
    fmt: str, target: IO[bytes], columns: Sequence[str], rows: Iterator[dict[str, Any]]
) -> None:
    """Write ``rows`` (a row lacks a column: ``None``) with ``columns`` to ``target`` in ``fmt``
    (one of :data:`FORMATS`), batch by batch."""
    _WRITERS[fmt](target, columns, rows)


#: The largest whole number a column holds (Parquet ``int64``, and the spool's JSON).
INT64_MAX = 2**63 - 1


def _too_large(row: dict[str, Any]) -> CliError | None:
    for column, value in row.items():
        if type(value) is int and value > INT64_MAX:
            return CliError(
                ExitCode.USAGE,
                f"step {row['step_idx']} of run {shown_id(str(row['run_id']))} has {column} = "
                f"{value}, beyond the table's 64-bit whole numbers; leave that run out (--run) "
                "and read it with `polyloop export`.",
            )
    return None


async def _spool(table: StepTable, spool: IO[bytes]) -> tuple[int, set[str]]:
    count = 0
    keys: set[str] = set()
    async for row in table:
        keys.update(key for key in row if is_key_column(key))
        problem = _too_large(row)
        if problem is not None:
            raise problem
        spool.write(orjson.dumps(row) + b"\n")
        count += 1
    return count, keys


def _spool_file(directory: Path | None) -> IO[bytes]:
    try:
        # Closed by the caller's ``with``.
        return tempfile.TemporaryFile(dir=directory, prefix=".polyloop-steps-")
    except OSError as error:
        raise CliError(
            ExitCode.STORE_UNREADABLE,
            f"cannot write in {directory} ({error.strerror}); choose a writable -o path.",
        ) from None


def _finish(fmt: str, columns: Sequence[str], spool: IO[bytes], output: Path | None) -> None:
    """Write the spooled rows to a file beside ``output``, then put it in ``output``'s place;
    ``None``: to stdout."""
    if output is None:
        write_rows(fmt, sys.stdout.buffer, columns, _spooled(spool))
        sys.stdout.buffer.flush()
        return
    with tempfile.NamedTemporaryFile(
        dir=output.parent, prefix=".polyloop-steps-", delete=False
    ) as target:
        try:
            write_rows(fmt, target, columns, _spooled(spool))
        except BaseException:
            Path(target.name).unlink(missing_ok=True)
            raise
    os.replace(target.name, output)


async def write_table(
    url: StoreUrl,
    run_ids: Sequence[str] | None,
    fmt: str,
    output: Path | None,
    *,
    missing_advice: str,
) -> tuple[StepTable, int]:
    """Write the table of ``run_ids`` (all runs when ``None``) of the store at ``url`` to
    ``output`` in ``fmt`` (``None``: stdout); returns the table (its ``unreadable`` and
    ``missing``) and the row count. The file appears whole or not at all (written beside, then
    renamed); stdout gets the rows once every run is read."""
    with _spool_file(None if output is None else output.parent) as spool:
        async with open_store(url, missing_advice=missing_advice) as store:
            table = StepTable(store, run_ids)
            try:
                count, keys = await _spool(table, spool)
            except ConfigurationError as error:
                raise CliError(ExitCode.STORE_UNREADABLE, " ".join(str(error).split())) from None
        try:
            await asyncio.to_thread(_finish, fmt, step_columns(keys), spool, output)
        except OSError as error:
            raise CliError(
                ExitCode.STORE_UNREADABLE,
                f"cannot write {output} ({error.strerror}); choose a writable -o path.",
            ) from None
    return table, count


def _damage_detail(unreadable: Sequence[Unreadable]) -> str:
    named = "; ".join(part.describe() for part in unreadable[:3])
    more = f"; and {len(unreadable) - 3} more" if len(unreadable) > 3 else ""
    return named + more


@click.command()
@click.option(
    "--run",
    "run_ids",
    multiple=True,
    metavar="ID",
    help="A run to include (repeat for more); default: every run of the store.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    required=True,
    help="parquet (needs polyloop-cli[parquet]), csv or jsonl.",
)
@output_option(
    "The file to write (replaced whole when the table is written). Without it, csv and jsonl "
    "go to stdout."
)
@store_option_saying(STORE_AS_FOR_RUNS)
@json_option_saying("Print a JSON summary instead of a line.")
def steps(
    run_ids: tuple[str, ...], fmt: str, output_path: Path | None, store: str | None, as_json: bool
) -> None:
    """Write every StepRecord of the selected runs as one table: run_id, every StepRecord
    field, stop_reason, the model-binding keys, finish_reason, replayed_on_resume, run_status
    and one usage.<key> column per token count the replies reported.

    Read it with pandas.read_parquet, polars.read_parquet or DuckDB; from Python without the
    CLI, polyloop.stores.step_table.StepTable gives the same rows.
    """
    if output_path is None and fmt == "parquet":
        raise click.UsageError("--format parquet writes a binary file: give it with -o PATH.")
    if output_path is None and as_json:
        raise click.UsageError(
            "--json summarizes a table written to a file: give -o PATH, or leave --json out to "
            "get the table on stdout."
        )
    if fmt == "parquet":
        _parquet_modules()
    choice = store_choice(store)
    url, advice = choice.url, choice.missing_advice
    option = () if store is None else ("--store", str(url))
    table, count = asyncio.run(
        write_table(url, run_ids or None, fmt, output_path, missing_advice=advice)
    )
    output = Output(as_json=as_json)
    if as_json:
        output.json(
            {
                "store": str(url),
                "format": fmt,
                "output": str(output_path),
                "runs": table.runs_read,
                "rows": count,
                "unreadable": [part.describe() for part in table.unreadable],
                "missing": list(table.missing),
            }
        )
    elif output_path is None:
        for part in table.unreadable:  # stdout holds the table
            output.note(f"unreadable: {part.describe()}", style="red")
    else:
        output.line(f"wrote {count} steps of {table.runs_read} runs to {output_path} ({fmt}).")
        for part in table.unreadable:
            output.line(f"unreadable: {part.describe()}", style="red")
    if table.missing:
        named = ", ".join(shown_id(run_id) for run_id in table.missing[:3])
        raise CliError(
            ExitCode.RUN_NOT_FOUND,
            f"no run {named} in the {url.kind} store at {url.location} (the table holds the "
            f"other runs); list the runs with `{suggest('runs', *option)}`.",
        )
    if table.unreadable:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"{len(table.unreadable)} run(s) or run file(s) could not be read whole; the table "
            f"holds what could; `{suggest('verify', '--all', *option)}` names the bad records.",
            detail=_damage_detail(table.unreadable),
        )
