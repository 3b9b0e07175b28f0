"""The operator console (issue 39) on a store of many runs: how long its pages take.

    uv run python bench/console_bench.py [--store sqlite|postgres] [--runs 100000]
        [--parked 10000] [--repeat 3] [--before SRC_DIRS]

Writes ``--runs`` runs into one store (SQLite file, or a fresh schema of the PostgreSQL server
named by ``POLYLOOP_TEST_POSTGRES_URL``): ``--parked`` of them parked on an approval, the rest
finished after two tool steps; each run is one batched write (``RecordBatching``), many at once,
so a group commit carries hundreds of runs. The parked runs' records are built as the loop
writes them (a reply, then the ask), not by driving an agent, which would take hours.

Then starts a real ``polyloop serve`` on a loopback port, signs in over HTTP and times each page
(a full HTTP round trip: the first paint of that page), median of ``--repeat``: the inbox and
its second page, the runs page (first page, a keyset page, a search, status, tool and binding
filters). The first request is timed apart: on a store just written (or a file from before
design 0070) it makes the overview of every run once. ``--before`` names source directories
(``:``-separated, e.g. an older checkout's ``packages/*/src``) put first on the server's
``PYTHONPATH`` to time the same pages with that code (once each: it reads every log).
Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.cli.shared.test_postgres_store import with_schema
from tests.console._kit import Served, serve, signed_in
from tests.stores._postgres import drop_schemas

from polyloop.asking import AskKind, UserAsked
from polyloop.ports import RecordBatching
from polyloop.serialization import LogRecord
from polyloop.stores.postgres import PostgresRunStore
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.testing import run_finished, run_started, tool_step
from polyloop.types import StopReason

TEAMS = ("red", "blue", "green")
DIGEST = "a" * 64


def _snapshot(index: int, gated: bool) -> dict[str, str]:
    snapshot = {
        "model_client.kind": "scripted",
        "model_client.model": "bench",
        "request.tools": '["lookup", "refund"]',
        "request.model_binding.team": TEAMS[index % 3],
    }
    for tool in ("lookup", "refund"):
        snapshot[f"request.tools.{tool}.replay_policy"] = "safe"
        snapshot[f"request.tools.{tool}.completes_run"] = "false"
    if gated:
        snapshot["request.tools.refund.requires_approval"] = "true"
    return snapshot


def finished_run(index: int) -> list[LogRecord]:
    run_id = f"run-{index:06d}"
    steps = [tool_step(run_id, k, tool_name="lookup") for k in range(2)]
    records: list[LogRecord] = [run_started(run_id, _snapshot(index, False))]
    for step in steps:
        records.extend(step.records)
    records.append(run_finished(run_id, steps, StopReason.STEP_BUDGET))
    return records


def parked_run(index: int) -> list[LogRecord]:
    run_id = f"parked-{index:05d}"
    reply = tool_step(run_id, 0, tool_name="refund")
    asked_at = f"2026-12-01T{index // 3600 % 24:02d}:{index // 60 % 60:02d}:{index % 60:02d}Z"
    ask = UserAsked(
        run_id, 0, AskKind.APPROVAL, "CALL refund {}", "refund", "{}", DIGEST, DIGEST, DIGEST,
        None, None, asked_at,
    )  # fmt: skip
    return [
        run_started(run_id, _snapshot(index, True)),
        reply.model_intent,
        reply.model_result,
        ask,
    ]


async def fill(store: RecordBatching, runs: int, parked: int, at_once: int = 500) -> None:
    """Each run one batched write; ``at_once`` runs in flight, so their commits are shared."""
    todo = [("p", i) for i in range(parked)] + [("f", i) for i in range(runs - parked)]
    for start in range(0, len(todo), at_once):
        await asyncio.gather(
            *(
                store.write_records(parked_run(i) if kind == "p" else finished_run(i))
                for kind, i in todo[start : start + at_once]
            )
        )


def timed(client: object, path: str, params: dict[str, str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        answer = client.get(path, params=params)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - start)
        assert 200 == answer.status_code, answer.text[:300]
    return statistics.median(times)


def pages(runs: int, parked: int) -> dict[str, tuple[str, dict[str, str]]]:
    return {
        "inbox": ("/", {}),
        "inbox, second page": (
            "/",
            {"after_at": "2026-12-01T00:00:49Z", "after_run": "parked-00049"},
        ),
        "runs, first page": ("/runs", {}),
        "runs, keyset page": ("/runs", {"after": f"run-{(runs - parked) // 2:06d}"}),
        "runs, search": ("/runs", {"q": "run-0099"}),
        "runs, status waiting_approval": ("/runs", {"status": "waiting_approval"}),
        "runs, status unfinished (none is)": ("/runs", {"status": "unfinished"}),
        "runs, status finished after half": (
            "/runs",
            {"status": "finished", "after": f"run-{(runs - parked) // 2:06d}"},
        ),
        "runs, tool refund + binding team=blue": (
            "/runs",
            {"tool": "refund", "binding": "team=blue"},
        ),
    }


@contextmanager
def served(home: Path, url: str, python_path: str | None) -> Iterator[Served]:
    saved = os.environ.get("PYTHONPATH")
    if python_path:
        os.environ["PYTHONPATH"] = python_path
    try:
        running = serve(home, url)
    finally:
        if python_path:
            if saved is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = saved
    try:
        yield running
    finally:
        running.stop()


#: The token printed at the console's first start (later starts do not print it).
TOKEN: list[str] = []


def measure(
    label: str,
    home: Path,
    url: str,
    options: argparse.Namespace,
    python_path: str | None,
    reopen: Callable[[], SqliteRunStore | PostgresRunStore] | None = None,
) -> None:
    """Time the pages; with ``reopen``, then write ``--written`` more finished runs and time
    the inbox that sees them (its page remakes their overviews first)."""
    repeat = 1 if python_path else options.repeat
    with served(home, url, python_path) as running:
        if running.token is not None:
            TOKEN.append(running.token)
        with signed_in(running, TOKEN[0]) as client:
            client.timeout = httpx.Timeout(3600)
            start = time.perf_counter()
            first = client.get("/runs", params={"q": "no-such-run"})
            assert 200 == first.status_code
            took = time.perf_counter() - start
            print(f"[{label}] first request (overviews made) {took:8.2f} s")
            for name, (path, params) in pages(options.runs, options.parked).items():
                median = timed(client, path, params, repeat)
                print(f"[{label}] {name:40s} {median * 1000:9.0f} ms")
            if reopen is not None and options.written:
                asyncio.run(write_more(reopen(), options))
                start = time.perf_counter()
                assert 200 == client.get("/").status_code
                took = (time.perf_counter() - start) * 1000
                print(f"[{label}] inbox after {options.written} runs written    {took:9.0f} ms")
                print(
                    f"[{label}] {'inbox again':40s} {timed(client, '/', {}, repeat) * 1000:9.0f} ms"
                )


async def write_more(store: SqliteRunStore | PostgresRunStore, options: argparse.Namespace) -> None:
    """``--written`` new finished runs, batched: the next page remakes their overviews."""
    async with store:
        await asyncio.gather(
            *(
                store.write_records(finished_run(options.runs + index))
                for index in range(options.written)
            )
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--parked", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default="")
    parser.add_argument("--written", type=int, default=1000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        home = Path(scratch) / "home"
        home.mkdir()
        schema = f"plt_bench_{secrets.token_hex(4)}"
        if options.store == "sqlite":
            path = home / "runs.sqlite"
            store: SqliteRunStore | PostgresRunStore = SqliteRunStore(path)
            url = f"sqlite:{path}"

            def reopen() -> SqliteRunStore | PostgresRunStore:
                return SqliteRunStore(path)
        else:
            server = os.environ["POLYLOOP_TEST_POSTGRES_URL"]
            store = PostgresRunStore(server, schema=schema)
            url = with_schema(server, schema)

            def reopen() -> SqliteRunStore | PostgresRunStore:
                return PostgresRunStore(server, schema=schema)

        async def write() -> None:
            async with store:
                await fill(store, options.runs, options.parked)

        began = time.perf_counter()
        asyncio.run(write())
        print(
            f"wrote {options.runs} runs ({options.parked} parked) to {options.store} in "
            f"{time.perf_counter() - began:.1f} s"
        )
        try:
            if options.before:
                measure("before", home, url, options, options.before)
            measure("after", home, url, options, None, reopen)
        finally:
            if options.store == "postgres":
                drop_schemas([schema])


if __name__ == "__main__":
    main()
