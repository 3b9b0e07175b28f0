"""The PostgreSQL store under the loop (issue 13): W1, W2, W3 next to the server's floors.

    uv run python bench/postgres_bench.py [--quick] [--url URL]

The server is ``--url``, else ``POLYLOOP_TEST_POSTGRES_URL``, else a throwaway cluster started
(and removed) with ``scripts/postgres-test-cluster.sh``. Everything runs against that one server
in one run; each workload uses a fresh schema, dropped at the end.

- floor (a): one ``INSERT`` + ``COMMIT`` (autocommit) per write, 4 writes per step, one
  connection, into a table laid out like the store's.
- floor (b): the pending writes of 50 concurrent runs share one commit: one statement of 50
  rows per round (or 50 pipelined ``INSERT``s in one transaction, whichever is faster), 4
  rounds per step.
- W1: one run of 200 and 1,000 steps through ``polyloop.session.run`` (scripted model calling a
  ``noop`` tool), µs per step, each sample paired with a floor (a) sample taken just before it.
- W2: 50 concurrent runs x 40 steps in one process, steps/s, paired with floor (b); and 4
  processes x 50 runs x 40 steps started together, with the CPU split between the clients and
  the server (when the server runs on this machine).
- W3: a 1,000-step run whose process is SIGKILLed inside its next model call; a fresh process
  opens the store, resumes and takes one more step: milliseconds (imports excluded). Next to
  it, in the same run on the same server, each in a fresh process with imports excluded:
  - the W3 floor: connect with psycopg and read the rows the resume reads (the run's
    ``run_records`` rows in ``seq`` order, binary), and the same plus parsing each body with
    ``orjson`` (what any reader of the JSON must at least do);
  - LangGraph's ``PostgresSaver`` holding an equivalent 1,000-step thread: reopen, read the
    latest checkpoint, one more step (``bench/postgres_langgraph_peer.py``). LangGraph is NOT
    a dependency of the workspace: the peer runs in a child process started with
    ``$UV run --no-sync --with langgraph-checkpoint-postgres --with langgraph`` (packages from
    PyPI for that command only, nothing written to uv.lock); ``--no-peer`` skips it, and it is
    skipped with a message when uv or PyPI is not reachable.
- leases: acquire + release of one run lease, µs (the loop will do it once per run).
- bytes per step: ``pg_total_relation_size`` of the records table after runs of 200 and
  2,000 steps (indexes included).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import os
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import orjson
import psycopg
from psycopg import sql

from polyloop.session import resume, run
from polyloop.stores.postgres import PostgresRunStore

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stores_bench import setup  # the same agent as the other stores' benchmark

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "postgres-test-cluster.sh")
PEER = os.path.join(ROOT, "bench", "postgres_langgraph_peer.py")
PEER_PACKAGES = ("--with", "langgraph-checkpoint-postgres", "--with", "langgraph")
BODY = (
    b'{"type":"intent","record":{"run_id":"bench","kind":"model_call","call_index":7,'
    b'"result_id":"model-7","replay_policy":"safe","schema_version":1}}'
) * 2
FLOOR_TABLE = """CREATE TABLE {table} (
    run_key bytea NOT NULL, seq bigint GENERATED ALWAYS AS IDENTITY, kind text NOT NULL,
    record_key bytea NOT NULL, run_id bytea NOT NULL, body bytea NOT NULL,
    PRIMARY KEY (run_key, seq), UNIQUE (run_key, kind, record_key))"""
INSERT_ONE = (
    "INSERT INTO {table} (run_key, kind, record_key, run_id, body) VALUES (%b, %b, %b, %b, %b)"
)
INSERT_MANY = (
    "INSERT INTO {table} (run_key, kind, record_key, run_id, body) SELECT k, t, r, i, b FROM "
    "unnest(%b::bytea[], %b::text[], %b::bytea[], %b::bytea[], %b::bytea[]) "
    "WITH ORDINALITY AS w (k, t, r, i, b, n) ORDER BY n"
)


class Bench:
    """One server, fresh schemas on it, dropped at the end."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.prefix = f"bench_{secrets.token_hex(3)}"
        self.count = 0
        self.commits_per_step = 0.0
        self.w2_commits_per_step = 0.0

    def schema(self) -> str:
        self.count += 1
        return f"{self.prefix}_{self.count}"

    def connect(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.url, autocommit=True)

    def drop_all(self) -> None:
        with self.connect() as connection:
            names = connection.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (self.prefix + "%",)
            ).fetchall()
            for (name,) in names:
                connection.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(name)))

    def store(self, schema: str | None = None) -> PostgresRunStore:
        return PostgresRunStore(self.url, schema=schema or self.schema())

    # -- floors ---------------------------------------------------------------------------

    @contextmanager
    def floor_table(self) -> Iterator[tuple[psycopg.Connection[tuple[object, ...]], str]]:
        schema = self.schema()
        with self.connect() as connection:
            connection.execute("SET synchronous_commit = on")
            connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
            table = sql.Identifier(schema, "floor").as_string(connection)
            connection.execute(FLOOR_TABLE.format(table=table))
            yield connection, table

    def floor_a(self, steps: int) -> float:
        """µs per step: 4 single-row INSERTs, each its own commit."""
        with self.floor_table() as (connection, table):
            query = INSERT_ONE.format(table=table)
            began = time.perf_counter()
            for n in range(steps * 4):
                connection.execute(query, (b"r" * 32, "intent", b"%d" % n, b"bench", BODY))
            return (time.perf_counter() - began) / steps * 1e6

    def floor_b(self, writers: int, rounds: int) -> float:
        """steps/s: each round one commit for ``writers`` rows; the better of one multi-row
        statement and pipelined single-row INSERTs in one transaction."""
        best = 0.0
        for pipelined in (False, True):
            with self.floor_table() as (connection, table):
                many, one = INSERT_MANY.format(table=table), INSERT_ONE.format(table=table)
                keys = [b"%032d" % w for w in range(writers)]
                began = time.perf_counter()
                for r in range(rounds):
                    record_keys = [b"%d" % r] * writers
                    if pipelined:
                        with connection.pipeline(), connection.transaction():
                            for w in range(writers):
                                connection.execute(
                                    one, (keys[w], "intent", record_keys[w], b"bench", BODY)
                                )
                    else:
                        connection.execute(
                            many,
                            (
                                keys,
                                ["intent"] * writers,
                                record_keys,
                                [b"bench"] * writers,
                                [BODY] * writers,
                            ),
                        )
                elapsed = time.perf_counter() - began
            best = max(best, writers * rounds / 4 / elapsed)
        return best

    # -- workloads --------------------------------------------------------------------------

    async def w1(self, steps: int) -> float:
        """Seconds for one run of ``steps`` steps on a fresh schema (``run`` takes and gives
        back the run's lease itself, so W1 includes it); the commits it made per step go to
        ``self.commits_per_step``."""
        store = self.store()
        await store.open()
        definition, request = setup(store, steps, "w1")
        gc.collect()
        began = time.perf_counter()
        result = await run(definition, request)
        elapsed = time.perf_counter() - began
        assert len(result.steps) == steps, result.stop_reason
        self.commits_per_step = store.commits / steps
        await store.aclose()
        return elapsed

    async def w2(self, runs: int, steps: int, schema: str | None = None) -> float:
        """Aggregate steps/s of ``runs`` concurrent runs on one store."""
        store = self.store(schema)
        await store.open()
        definition, _ = setup(store, steps, "unused")
        tag = secrets.token_hex(3)
        requests = [setup(store, steps, f"w2-{tag}-{i}")[1] for i in range(runs)]
        gc.collect()
        began = time.perf_counter()
        results = await asyncio.gather(*(run(definition, r) for r in requests))
        elapsed = time.perf_counter() - began
        assert all(len(r.steps) == steps for r in results)
        self.w2_commits_per_step = store.commits / (runs * steps)
        await store.aclose()
        return runs * steps / elapsed

    async def lease_cycle(self, rounds: int) -> float:
        """µs for one acquire + release of a run lease."""
        store = self.store()
        await store.open()
        began = time.perf_counter()
        for n in range(rounds):
            await (await store.acquire_run_lease(f"l{n}")).release()
        elapsed = time.perf_counter() - began
        await store.aclose()
        return elapsed / rounds * 1e6

    async def bytes_per_step(self, steps: int) -> float:
        schema = self.schema()
        store = self.store(schema)
        definition, request = setup(store, steps, "size")
        await run(definition, request)
        await store.aclose()
        with self.connect() as connection:
            table = sql.Identifier(schema, "run_records").as_string(connection)
            connection.execute(f"VACUUM {table}")  # settle the free-space map, as a long run would
            row = connection.execute("SELECT pg_total_relation_size(%s)", (table,)).fetchone()
        assert row is not None
        return int(row[0]) / steps

    def w3_log(self, steps: int) -> str:
        """A fresh schema holding a ``steps``-step run killed inside its next model call."""
        schema = self.schema()
        doomed = child(self.url, "w3-run", schema, str(steps))
        assert doomed.stdout is not None
        for line in doomed.stdout:
            if line.startswith("hanging"):
                break
        doomed.send_signal(signal.SIGKILL)
        doomed.wait()
        doomed.stdout.close()
        wait_for_sessions_of(self, doomed.pid)
        return schema

    def w3(self, schema: str, steps: int) -> float:
        """ms: a fresh process resumes the run of :meth:`w3_log` and takes one more step."""
        resumer = child(self.url, "w3-resume", schema, str(steps))
        out, _ = resumer.communicate()
        return float(out.split()[-1])

    def w3_floor(self, schema: str, parse: bool) -> float:
        """ms: a fresh process connects and reads the rows W3's resume reads."""
        reader = child(self.url, "w3-floor-parse" if parse else "w3-floor", schema, "0")
        out, _ = reader.communicate()
        return float(out.split()[-1])


def uv_command() -> str | None:
    return os.environ.get("UV") or shutil.which("uv")


class LangGraphPeer:
    """LangGraph's PostgresSaver on the same server, in child processes (see the docstring)."""

    def __init__(self, bench: Bench, steps: int, threads: int) -> None:
        self.bench = bench
        self.steps = steps
        self.schema = bench.schema()
        self.uv = uv_command()
        self.threads = threads
        self.failure: str | None = None if self.uv else "uv not found (set UV)"

    def _run(self, *args: str) -> str | None:
        assert self.uv is not None
        done = subprocess.run(
            [self.uv, "run", "--no-sync", *PEER_PACKAGES, "python", PEER, self.bench.url, *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        if done.returncode != 0:
            self.failure = (done.stderr.strip().splitlines() or ["no message"])[-1][:200]
            return None
        return done.stdout

    def build(self) -> bool:
        if self.failure is None:
            self._run("build", self.schema, str(self.steps), str(self.threads))
        return self.failure is None

    def resume(self, thread: int) -> float | None:
        if self.failure is not None:
            return None
        out = self._run("resume", self.schema, str(self.steps), str(thread))
        return None if out is None else float(out.split()[-1])


def wait_for_sessions_of(bench: Bench, pid: int) -> None:
    with bench.connect() as connection:
        for _ in range(2000):
            row = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                (f"polyloop % {pid}@%",),
            ).fetchone()
            if row == (0,):
                return
            time.sleep(0.005)


def child(url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--url", url, "--child", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


# -- CPU accounting ------------------------------------------------------------------------


def _ticks(pid: int, with_children: bool) -> int:
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    # after the name: state ppid ... utime(12) stime(13) cutime(14) cstime(15), 0-based from state
    total = int(fields[11]) + int(fields[12])
    if with_children:
        total += int(fields[13]) + int(fields[14])
    return total


def server_cpu_seconds(postmaster: int) -> float | None:
    """CPU time of the server so far: the postmaster, its reaped children and live ones."""
    try:
        total = _ticks(postmaster, True)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as handle:
                        ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
                    if ppid == postmaster:
                        total += _ticks(int(entry), False)
                except (OSError, ValueError, IndexError):
                    continue
    except OSError:
        return None
    return total / os.sysconf("SC_CLK_TCK")


def postmaster_pid(bench: Bench) -> int | None:
    with bench.connect() as connection:
        row = connection.execute("SELECT pg_backend_pid()").fetchone()
    assert row is not None
    try:
        with open(f"/proc/{row[0]}/stat") as handle:
            return int(handle.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None  # the server is on another machine


def w2_processes(bench: Bench, processes: int, runs: int, steps: int) -> tuple[float, str]:
    """steps/s of ``processes`` processes x ``runs`` runs started together, and the CPU split."""
    schema = bench.schema()
    postmaster = postmaster_pid(bench)
    workers = [child(bench.url, "w2", schema, str(steps), str(runs)) for _ in range(processes)]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
    before_server = server_cpu_seconds(postmaster) if postmaster else None
    before_clients = os.times()
    began = time.perf_counter()
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    for worker in workers:
        worker.communicate()
    elapsed = time.perf_counter() - began
    after_clients = os.times()
    clients = (after_clients.children_user - before_clients.children_user) + (
        after_clients.children_system - before_clients.children_system
    )
    after_server = server_cpu_seconds(postmaster) if postmaster else None
    split = f"clients {clients / elapsed:.2f} cores"
    if before_server is not None and after_server is not None:
        split += f", server {(after_server - before_server) / elapsed:.2f} cores"
    # the clients' CPU includes their start-up and imports before "ready"? no: only after go.
    return processes * runs * steps / elapsed, split


async def w2_in_process_with_cpu(bench: Bench, runs: int, steps: int) -> tuple[float, str]:
    postmaster = postmaster_pid(bench)
    before_server = server_cpu_seconds(postmaster) if postmaster else None
    before = os.times()
    began = time.perf_counter()
    rate = await bench.w2(runs, steps)
    elapsed = time.perf_counter() - began
    after = os.times()
    after_server = server_cpu_seconds(postmaster) if postmaster else None
    client = (after.user - before.user) + (after.system - before.system)
    split = f"client {client / elapsed:.2f} cores"
    if before_server is not None and after_server is not None:
        split += f", server {(after_server - before_server) / elapsed:.2f} cores"
    return rate, split


# -- child modes ---------------------------------------------------------------------------


async def child_main(url: str, mode: str, schema: str, steps: int, runs: int) -> None:
    bench = Bench(url)
    if mode == "w3-run":
        store = bench.store(schema)
        definition, request = setup(store, steps + 1, "w3", hang_at=steps)
        await run(definition, request)
    elif mode == "w3-resume":
        began, cpu = time.perf_counter(), time.process_time()
        store = bench.store(schema)
        definition, request = setup(store, steps + 1, "w3", hang_at=None)
        result = await resume(definition, request)
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        assert len(result.steps) == steps + 1, (result.stop_reason, len(result.steps))
        await store.aclose()
        print(f"resumed cpu {cpu * 1e3:.2f} wall {elapsed * 1e3:.2f}")
    elif mode in ("w3-floor", "w3-floor-parse"):
        query = sql.SQL("SELECT seq, body FROM {} WHERE run_key = %b ORDER BY seq").format(
            sql.Identifier(schema, "run_records")
        )
        run_key = hashlib.sha256(b"w3").digest()
        began = time.perf_counter()
        with psycopg.connect(url, autocommit=True) as connection:
            rows = connection.execute(query, (run_key,), binary=True).fetchall()
            if mode == "w3-floor-parse":
                parsed = [orjson.loads(body) for _, body in rows]
                assert len(parsed) == len(rows)
        elapsed = time.perf_counter() - began
        assert len(rows) > 4 * steps
        print(f"read {elapsed * 1e3:.2f}")
    elif mode == "w2":
        store = bench.store(schema)
        await store.open()
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await store.aclose()
        await bench.w2(runs, steps, schema)


# -- report --------------------------------------------------------------------------------


async def floors_w1_w2(bench: Bench, pairs: int) -> None:
    print()
    print("floors (medians of separate samples)")
    fa = statistics.median(bench.floor_a(200) for _ in range(pairs))
    fb = statistics.median(bench.floor_b(50, 160) for _ in range(pairs))
    print(
        f"  (a) 4 INSERT+COMMIT per step, one connection : {fa:8.0f} µs/step = {1e6 / fa:6.0f} steps/s"
    )
    print(f"  (b) 50 writers, one commit per round         : {fb:8.0f} steps/s")

    print()
    print("W1: one run, µs per step, paired with floor (a)")
    print(f"  {'steps':>5} {'W1 µs/step':>11} {'floor (a)':>10} {'ratio':>6}")
    await bench.w1(20)  # warm-up
    for steps in (200, 1_000):
        n = pairs if steps == 200 else max(3, pairs // 2)
        w1s, floors, ratios = [], [], []
        for _ in range(n):
            f = bench.floor_a(steps)
            w = await bench.w1(steps) / steps * 1e6
            w1s.append(w)
            floors.append(f)
            ratios.append(w / f)
        print(
            f"  {steps:>5} {statistics.median(w1s):>11.0f} {statistics.median(floors):>10.0f} "
            f"{statistics.median(ratios):>6.2f}   store commits per step "
            f"{bench.commits_per_step:.2f} (floor (a): 4)"
        )
    cycle = statistics.median([await bench.lease_cycle(100) for _ in range(3)])
    print(f"  lease acquire + release: {cycle:.0f} µs (once per run)")

    print()
    print("W2: 50 concurrent runs x 40 steps in one process, steps/s, paired with floor (b)")
    w2s, floors, ratios = [], [], []
    for _ in range(max(3, pairs // 2)):
        f = bench.floor_b(50, 160)
        w = await bench.w2(50, 40)
        w2s.append(w)
        floors.append(f)
        ratios.append(w / f)
    print(
        f"  W2 {statistics.median(w2s):.0f} steps/s, floor (b) {statistics.median(floors):.0f}, "
        f"ratio {statistics.median(ratios):.2f}; commits per step {bench.w2_commits_per_step:.3f}"
    )
    one_rate, one_split = await w2_in_process_with_cpu(bench, 50, 40)
    four_rate, four_split = w2_processes(bench, 4, 50, 40)
    print(f"  1 process  x 50 runs: {one_rate:6.0f} steps/s ({one_split})")
    print(f"  4 processes x 50 runs: {four_rate:6.0f} steps/s ({four_split})")


async def main(bench: Bench, quick: bool, with_peer: bool, only_w3: bool) -> None:
    pairs = 3 if quick else 7
    print(f"PolyLoop postgres store — {os.uname().sysname}, {os.cpu_count()} CPUs")
    with bench.connect() as connection:
        version = connection.execute("SHOW server_version").fetchone()
        fsync = connection.execute("SHOW fsync").fetchone()
    print(f"server PostgreSQL {version[0] if version else '?'}, fsync={fsync[0] if fsync else '?'}")
    print("Every workload sample is paired with a floor sample taken just before it;")
    print("columns are medians over the pairs (ratio = median of per-pair ratios).")

    if not only_w3:
        await floors_w1_w2(bench, pairs)

    print()
    print("W3: fresh process, open + resume a 1,000-step run killed in its next model call")
    print("    + one more step (imports excluded); the same run, side by side:")
    print("    floor = connect + read the run's rows; LangGraph = PostgresSaver, 1,000-step thread")
    print("    reopened + latest checkpoint + one more step")
    reps = 5 if quick else 9
    peer = LangGraphPeer(bench, 1_000, reps) if with_peer else None
    if peer is not None and not peer.build():
        print(f"  LangGraph peer skipped: {peer.failure}")
    columns: dict[str, list[float]] = {
        "polyloop": [],
        "floor": [],
        "floor+parse": [],
        "langgraph": [],
    }
    for rep in range(reps):
        schema = bench.w3_log(1_000)
        # Interleaved, so that each sample of one column meets the load another column met.
        columns["floor"].append(bench.w3_floor(schema, parse=False))
        columns["floor+parse"].append(bench.w3_floor(schema, parse=True))
        if peer is not None:
            lg = peer.resume(rep)
            if lg is not None:
                columns["langgraph"].append(lg)
        columns["polyloop"].append(bench.w3(schema, 1_000))
    medians = {name: statistics.median(xs) for name, xs in columns.items() if xs}
    for name, xs in columns.items():
        if xs:
            print(
                f"  {name:12} median {medians[name]:7.1f} ms  (samples {', '.join(f'{x:.0f}' for x in xs)})"
            )
    ratio = statistics.median(
        p / f for p, f in zip(columns["polyloop"], columns["floor"], strict=True)
    )
    print(f"  polyloop / floor: {ratio:.2f} (median of per-rep ratios; target <= 1.3)")
    if columns["langgraph"]:
        lg_ratio = statistics.median(
            p / g for p, g in zip(columns["polyloop"], columns["langgraph"], strict=False)
        )
        print(f"  polyloop / langgraph: {lg_ratio:.2f} (target <= 1)")
    if only_w3:
        return
    sizes = {steps: await bench.bytes_per_step(steps) for steps in (200, 2_000)}
    marginal = (sizes[2_000] * 2_000 - sizes[200] * 200) / 1_800
    print(
        f"  bytes/step {sizes[200]:.0f} @200, {sizes[2_000]:.0f} @2000 "
        f"(each step beyond 200: {marginal:.0f}; the rest is the tables' first pages)"
    )

    print()
    print("targets: W1 ratio <= 1.5 at 200 and 1,000 steps; W2 one process >= 0.60 of (b);")
    print("W3 <= LangGraph and <= 1.3x the floor; bytes per step constant.")


@contextmanager
def server(url: str | None) -> Iterator[str]:
    if url:
        yield url
        return
    directory = subprocess.run(
        ["bash", SCRIPT, "start"], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        with open(os.path.join(directory, "url")) as handle:
            yield handle.read().strip()
    finally:
        subprocess.run(["bash", SCRIPT, "stop", directory], check=False)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats (smoke run)")
    parser.add_argument("--url", default=os.environ.get("POLYLOOP_TEST_POSTGRES_URL"))
    parser.add_argument("--no-peer", action="store_true", help="skip the LangGraph peer of W3")
    parser.add_argument("--only-w3", action="store_true", help="run the W3 section only")
    parser.add_argument("--child", nargs="+", metavar="ARG")
    arguments = parser.parse_args()
    if arguments.child:
        mode, schema, steps, *rest = arguments.child
        asyncio.run(
            child_main(arguments.url, mode, schema, int(steps), int(rest[0]) if rest else 0)
        )
    else:
        with server(arguments.url) as url:
            bench = Bench(url)
            try:
                asyncio.run(main(bench, arguments.quick, not arguments.no_peer, arguments.only_w3))
            finally:
                bench.drop_all()
