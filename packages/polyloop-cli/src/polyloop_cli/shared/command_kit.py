"""What the ``polyloop`` commands that read a store share: the --store, --json and --output
options, the store the user chose (:class:`StoreChoice`), reading a run that must exist, and the
errors of a run that is not there, a log that is corrupt or a listing that cannot be trusted.

The command modules (``runs``, ``show``, ``plan``, ``verify``, ``export``, ``pending``, the
deciding commands, ``resume``) import these; none imports :mod:`polyloop_cli.main`, which only
gathers the commands into the group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import click

from polyloop.ports import LeaseHolder, RunLog
from polyloop.stores.urls import shown_url
from polyloop_cli.rendering.inspection import corruption
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id
from polyloop_cli.shared.stores import (
    StoreUrl,
    default_store_url,
    lease_holder,
    open_store,
    parse_store_url,
    read_log,
)

__all__ = [
    "STORE_AS_FOR_RUNS",
    "STORE_HELP",
    "StoreChoice",
    "existing_log",
    "existing_log_and_holder",
    "json_option",
    "json_option_saying",
    "output_option",
    "refuse_corrupt",
    "run_coroutine",
    "run_not_found",
    "status_detail",
    "store_choice",
    "store_option",
    "store_option_saying",
    "untrusted_listing",
]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

STORE_HELP = (
    "Store URL: sqlite:///abs/file.sqlite, sqlite:rel/file.sqlite, jsonl:///abs/dir, "
    "jsonl:rel/dir, postgresql://user@host:port/db?schema=name, or the scheme of any installed "
    "store (entry-point group polyloop.stores). Default: $POLYLOOP_STORE, else the demo store "
    "sqlite:$POLYLOOP_HOME/demo.sqlite (POLYLOOP_HOME defaults to ./.polyloop). A password is "
    "never printed: give it with PGPASSWORD or ~/.pgpass to paste the commands shown."
)


def run_coroutine(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine to its end (each command is one event loop)."""
    return asyncio.run(coroutine)


#: The --store of a command that only reads (or writes to) the store another command lists.
STORE_AS_FOR_RUNS = (
    "Store URL, as for `polyloop runs` (default: $POLYLOOP_STORE, else the demo store)."
)


def store_option_saying(help_text: str) -> Callable[[F], F]:
    """``--store URL`` (parameter ``store``, default ``None``: the default store)."""
    return click.option("--store", "store", metavar="URL", default=None, help=help_text)


def json_option_saying(help_text: str) -> Callable[[F], F]:
    """``--json`` (flag, parameter ``as_json``)."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


def output_option(help_text: str, *, required: bool = False, file: bool = True) -> Callable[[F], F]:
    """``--output``/``-o`` (parameter ``output_path``, a :class:`~pathlib.Path`); ``file``: it
    names a file, never a directory."""
    kind = click.Path(dir_okay=False, path_type=Path) if file else click.Path(path_type=Path)
    return click.option(
        "--output", "-o", "output_path", type=kind, required=required, default=None, help=help_text
    )


def store_option(function: F) -> F:
    return store_option_saying(STORE_HELP)(function)


def json_option(function: F) -> F:
    return json_option_saying("Print one JSON document instead of tables.")(function)


@dataclass(frozen=True, slots=True)
class StoreChoice:
    """The store a command reads, and how the user named it (for the commands it suggests)."""

    url: StoreUrl
    #: ``("--store", URL)`` when the user passed --store, else ``()`` (the default store).
    option: tuple[str, ...]

    @property
    def missing_advice(self) -> str:
        if self.option:
            return "pass --store with the path of an existing store."
        return f"run `{suggest('demo')}` to create the demo store, or pass --store."


def store_choice(value: str | None) -> StoreChoice:
    url = parse_store_url(value if value is not None else default_store_url())
    # Suggested commands name the store without its password (never printed).
    return StoreChoice(url, () if value is None else ("--store", shown_url(value.strip())))


def run_not_found(choice: StoreChoice, run_id: str) -> CliError:
    return CliError(
        ExitCode.RUN_NOT_FOUND,
        f"no run {shown_id(run_id)} in the {choice.url.kind} store at {choice.url.location}; list "
        f"the runs with `{suggest('runs', *choice.option)}`.",
    )


async def existing_log(choice: StoreChoice, run_id: str) -> RunLog:
    advice = f"`{suggest('show', run_id, *choice.option)}` shows what can be read."
    async with open_store(choice.url, missing_advice=choice.missing_advice) as store:
        log = await read_log(store, choice.url, run_id, advice=advice, name_store=not choice.option)
    if log == RunLog():
        raise run_not_found(choice, run_id)
    return log


async def existing_log_and_holder(
    choice: StoreChoice, run_id: str
) -> tuple[RunLog, LeaseHolder | None]:
    """The run's log and who drives it now (the lease is looked at first: a log read while a
    driver writes is at least as new as the answer)."""
    advice = f"`{suggest('show', run_id, *choice.option)}` shows what can be read."
    async with open_store(choice.url, missing_advice=choice.missing_advice) as store:
        holder = await lease_holder(store, choice.url, run_id)
        log = await read_log(store, choice.url, run_id, advice=advice, name_store=not choice.option)
    if log == RunLog():
        raise run_not_found(choice, run_id)
    return log, holder


def refuse_corrupt(choice: StoreChoice, log: RunLog, run_id: str, refusal: str) -> None:
    """Raise exit 6 (``<refusal> run <id>: its log is corrupt; …``) when the log is corrupt."""
    verdict = corruption(log, run_id)
    if verdict is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            f"{refusal} run {shown_id(run_id)}: its log is corrupt; "
            f"`{suggest('show', run_id, *choice.option)}` shows what it holds.",
            detail=verdict,
        )


def status_detail(row: dict[str, Any]) -> str | None:
    """``pid 4711 on worker-3``: who drives a ``running`` run, where the store can tell;
    ``step 2: issue_refund``: what a parked run waits on."""
    ask = row.get("pending_ask")
    if row["status"] == "waiting_approval" and ask is not None:
        return f"step {ask['step']}: {ask['tool_name'] or ask['kind']}"
    holder = row.get("holder")
    if row["status"] != "running" or holder is None or holder["process_id"] is None:
        return None
    where = f" on {holder['host_name']}" if holder["host_name"] else ""
    return f"pid {holder['process_id']}{where}"


def untrusted_listing(
    choice: StoreChoice, bad_runs: Sequence[str], total: int, files: Sequence[str]
) -> CliError:
    """The error closing a listing in which some runs (or run files) cannot be trusted."""
    parts = []
    if bad_runs:
        named = ", ".join(shown_id(run_id) for run_id in bad_runs[:3])
        more = ", …" if len(bad_runs) > 3 else ""
        parts.append(f"{len(bad_runs)} of {total} runs are corrupt or damaged ({named}{more})")
    if files:
        parts.append(f"{len(files)} run file(s) cannot be read")
    return CliError(
        ExitCode.CORRUPT_LOG,
        f"{' and '.join(parts)}; `{suggest('verify', '--all', *choice.option)}` names the bad "
        "records.",
    )
