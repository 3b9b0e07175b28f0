"""A batch spread over a Ray cluster (extra ``polyloop-batch[ray]``).

Each worker is an async Ray actor in a process of its own: it loads the user's factory by its
``module:factory`` name, opens the shared store once, and drives up to ``concurrency`` episodes
at a time with asyncio, through the same :class:`~polyloop.batch.LocalEpisodeDriver` as a batch
in one process. The pass itself — which episode next, held leases tried again, Ctrl-C — runs in
the calling process, exactly as :func:`polyloop.batch.run_batch` does.

Correctness never depends on Ray running a call once. When a worker dies mid-episode (its
process killed, its node lost), Ray restarts the actor and this driver sends the episode again,
to whichever worker is up: the run is resumed by the recovery table, since its lease died with
the process that held it. When a call is lost although its worker still lives (a partition), the
second driver is refused by the run's lease and the pass tries again later, finding the run
finished. A store whose files live on one disk (sqlite, jsonl) is refused unless every worker
sees that very disk: their leases are file locks, which exclude only on one shared file system.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import ray.exceptions

from polyloop.batch._placement import local_store_refusal
from polyloop.batch.agents import EpisodeFactory, load_factory
from polyloop.batch.driving import LocalEpisodeDriver, describe_error, this_worker
from polyloop.batch.episodes import Episode
from polyloop.batch.errors import FactoryError, WorkerSetupError
from polyloop.batch.passes import BatchControl, ReportObserver, run_episodes
from polyloop.batch.reports import EpisodeReport, EpisodeStatus
from polyloop.batch.summary import BatchSummary
from polyloop.errors import ConfigurationError
from polyloop.ports import RunStore

__all__ = [
    "DiskCheck",
    "EpisodeWorker",
    "FactoryWrapping",
    "StoreOpener",
    "WorkerInfo",
    "run_batch_on_ray",
]

#: A picklable zero-argument callable opening the batch's store (an async context manager).
StoreOpener = Callable[[], AbstractAsyncContextManager[RunStore]]

#: A picklable zero-argument callable each worker calls once when it starts: the context manager
#: it returns stays entered until the worker closes, and its value wraps the loaded factory.
#: What a worker must build for itself (an OpenTelemetry exporter: ``polyloop batch --ray
#: --otlp``, design 0074) is built there and closed (flushed) when the worker closes.
FactoryWrapping = Callable[[], AbstractContextManager[Callable[[EpisodeFactory], EpisodeFactory]]]

#: How long a worker may take to start (be placed, import, open the store), in seconds.
WORKER_START_SECONDS = 180.0
#: How long a dead worker may take to be restarted before the batch stops using it.
WORKER_RESTART_SECONDS = 120.0
#: How long cancelled episodes get to record ``cancelled`` before the batch ends.
CANCEL_GRACE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class DiskCheck:
    """A file the batch wrote beside a file store: a worker that reads back ``token`` there
    sees the same disk at the same path."""

    path: str
    token: str


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """Where a worker runs."""

    process_id: int
    host_name: str
    node_id: str


class EpisodeWorker:
    """The body of one Ray actor: drives episodes with the named factory on the opened store.

    ``__init__`` only keeps its arguments (Ray runs it again when it restarts the actor); the
    factory is loaded and the store opened by the first :meth:`ready` or :meth:`drive`.
    """

    def __init__(
        self,
        factory: str,
        store: StoreOpener,
        disk_check: DiskCheck | None,
        wrapping: FactoryWrapping | None = None,
    ) -> None:
        self.factory_spec = factory
        self.opener = store
        self.disk_check = disk_check
        self.wrapping = wrapping
        self.driver: LocalEpisodeDriver | None = None
        self.opened: AbstractAsyncContextManager[RunStore] | None = None
        self.wrapped: AbstractContextManager[object] | None = None
        self.starting: asyncio.Lock | None = None

    @ray.method(concurrency_group="control")
    async def ready(self) -> WorkerInfo:
        """Load the factory, check the disk, open the store; raise saying what failed."""
        await self._started()
        return WorkerInfo(
            os.getpid(), socket.gethostname(), ray.get_runtime_context().get_node_id()
        )

    async def _started(self) -> LocalEpisodeDriver:
        if self.starting is None:
            self.starting = asyncio.Lock()
        async with self.starting:
            if self.driver is None:
                self.driver = await self._start()
            return self.driver

    async def _start(self) -> LocalEpisodeDriver:
        where = this_worker()
        try:
            factory = load_factory(self.factory_spec)
        except FactoryError as error:
            raise WorkerSetupError(f"worker {where} cannot load the factory: {error}") from None
        check = self.disk_check
        if check is not None and _read_token(check.path) != check.token:
            raise WorkerSetupError(
                f"worker {where} does not see the store's disk: {check.path} is missing there; "
                "run every worker on the store's machine or disk, or use a postgresql:// store."
            )
        opened = self.opener()
        try:
            store = await opened.__aenter__()
        except Exception as error:
            raise WorkerSetupError(
                f"worker {where} cannot open the store: {describe_error(error)}"
            ) from None
        self.opened = opened
        if self.wrapping is not None:
            wrapped = self.wrapping()
            try:
                factory = wrapped.__enter__()(factory)
            except Exception as error:
                raise WorkerSetupError(
                    f"worker {where} cannot wrap the factory: {describe_error(error)}"
                ) from None
            self.wrapped = wrapped
        return LocalEpisodeDriver(factory, store)

    async def drive(self, episode: Episode, attempt: int) -> EpisodeReport:
        """One try of ``episode`` (see :class:`LocalEpisodeDriver`)."""
        driver = self.driver or await self._started()
        return await driver(episode, attempt)

    @ray.method(concurrency_group="control")
    async def close(self) -> None:
        """Close the store (writes in flight finish first)."""
        opened, self.opened, self.driver = self.opened, None, None
        wrapped, self.wrapped = self.wrapped, None
        try:
            if opened is not None:
                await opened.__aexit__(None, None, None)
        finally:
            if wrapped is not None:  # e.g. flushes the worker's spans: may wait on a network
                await asyncio.to_thread(wrapped.__exit__, None, None, None)


def _read_token(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return None


@dataclass(slots=True)
class _Worker:
    handle: Any
    index: int
    load: int = 0
    up: bool = True
    recovering: asyncio.Future[bool] | None = None


class RayEpisodeDriver:
    """Sends each try of an episode to the least busy worker that is up and has room (at most
    ``concurrency`` tries each), and sends it again when the worker is lost on the way."""

    def __init__(self, handles: Sequence[Any], concurrency: int) -> None:
        self.workers = [_Worker(handle, index) for index, handle in enumerate(handles)]
        self.concurrency = concurrency
        self.freed = asyncio.Event()

    async def _pick(self) -> _Worker | None:
        while True:
            live = [worker for worker in self.workers if worker.up]
            if not live and not any(worker.recovering for worker in self.workers):
                return None
            roomy = [worker for worker in live if worker.load < self.concurrency]
            if roomy:
                return min(roomy, key=lambda worker: (worker.load, worker.index))
            freed = self.freed
            waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(freed.wait())]
            waits += [
                w.recovering for w in self.workers if w.recovering and not w.recovering.done()
            ]
            try:
                await asyncio.wait(waits, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waits[0].cancel()

    def _free(self, worker: _Worker) -> None:
        worker.load -= 1
        self.freed.set()
        self.freed = asyncio.Event()

    async def __call__(self, episode: Episode, attempt: int) -> EpisodeReport:
        started = time.monotonic()
        calls = 0
        while True:
            worker = await self._pick()
            if worker is None:
                return EpisodeReport(
                    episode.run_id,
                    EpisodeStatus.ERROR,
                    error="WorkerSetupError: every Ray worker of the batch is gone",
                    wall_seconds=time.monotonic() - started,
                    attempts=max(calls, 1),
                )
            calls += 1
            worker.load += 1
            ref = worker.handle.drive.remote(episode, attempt)
            try:
                report: EpisodeReport = await ref
            except asyncio.CancelledError:
                await _cancel(ref)
                raise
            except ray.exceptions.RayActorError:
                # Lost with its worker: the run's log and lease decide what the next try does.
                self._recover(worker)
                continue
            finally:
                self._free(worker)
            return dataclasses.replace(
                report, attempts=calls, wall_seconds=time.monotonic() - started
            )

    def _recover(self, worker: _Worker) -> None:
        if worker.recovering is None or worker.recovering.done():
            worker.up = False
            worker.recovering = asyncio.ensure_future(self._wait_until_up(worker))

    async def _wait_until_up(self, worker: _Worker) -> bool:
        deadline = time.monotonic() + WORKER_RESTART_SECONDS
        while time.monotonic() < deadline:
            try:
                await worker.handle.ready.remote()
            except ray.exceptions.RayActorError:
                await asyncio.sleep(0.5)
                continue
            worker.up = True
            return True
        return False  # left down: the other workers carry on


async def _cancel(ref: Any) -> None:
    """Cancel the actor's task and give it time to record ``cancelled``."""
    ray.cancel(ref)
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await asyncio.wait_for(asyncio.wrap_future(ref.future()), CANCEL_GRACE_SECONDS)


def _check_reachable(address: str | None) -> None:
    """Refuse at once a ``host:port`` where nothing listens (``ray.init`` would retry for
    minutes); other forms (``auto``, ``ray://``) are left to Ray."""
    host, colon, port = (address or "").rpartition(":")
    if not colon or not port.isdigit() or not host or "/" in host:
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as error:
        raise WorkerSetupError(
            f"cannot connect to the Ray cluster at {address!r} ({error.strerror or error}); "
            "start it with `ray start --head` or check the address."
        ) from None


def _nodes() -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return nodes


def _cluster_resources() -> dict[str, float]:
    resources: dict[str, float] = ray.cluster_resources()  # type: ignore[no-untyped-call]
    return resources


def _check_hosts(local_store_path: Path, shared_disk: bool) -> None:
    hosts = [node["NodeManagerHostname"] for node in _nodes() if node.get("Alive")]
    refusal = local_store_refusal(local_store_path, hosts, socket.gethostname(), shared_disk)
    if refusal is not None:
        raise WorkerSetupError(refusal)


def _write_check(local_store_path: Path) -> DiskCheck:
    token = secrets.token_hex(16)
    path = local_store_path.absolute().parent / f".polyloop-batch-check-{token}"
    path.write_text(token, encoding="utf-8")
    return DiskCheck(str(path), token)


async def _start_workers(
    count: int,
    factory: str,
    store: StoreOpener,
    check: DiskCheck | None,
    concurrency: int,
    wrapping: FactoryWrapping | None = None,
) -> list[Any]:
    # ready/close run in a group of their own: they never queue behind episodes.
    remote = ray.remote(concurrency_groups={"control": 2})(EpisodeWorker).options(  # type: ignore[call-overload]
        num_cpus=1,
        max_restarts=-1,
        max_task_retries=0,  # this driver sends a lost episode again, and the lease decides
        max_concurrency=concurrency,
    )
    handles = [remote.remote(factory, store, check, wrapping) for _ in range(count)]
    try:
        async with asyncio.timeout(WORKER_START_SECONDS):
            await asyncio.gather(*(handle.ready.remote() for handle in handles))
    except TimeoutError:
        _kill(handles)
        raise WorkerSetupError(
            f"{count} Ray workers did not all start within {WORKER_START_SECONDS:.0f} s; the "
            f"cluster may have fewer free CPUs ({_cluster_resources().get('CPU', 0):g}) than "
            "--workers asks for."
        ) from None
    except ray.exceptions.RayActorError as error:
        _kill(handles)
        raise WorkerSetupError(
            f"a Ray worker died while starting: {describe_error(error)}"
        ) from None
    except ray.exceptions.RayTaskError as error:
        _kill(handles)
        cause = error.cause if isinstance(error.cause, BaseException) else error
        if isinstance(cause, WorkerSetupError):
            raise WorkerSetupError(str(cause)) from None
        raise WorkerSetupError(f"a Ray worker failed to start: {describe_error(cause)}") from None
    return handles


def _kill(handles: Iterable[Any]) -> None:
    for handle in handles:
        with contextlib.suppress(Exception):
            ray.kill(handle, no_restart=True)


async def _close_workers(handles: Sequence[Any]) -> None:
    closing = [handle.close.remote() for handle in handles]
    with contextlib.suppress(Exception):
        async with asyncio.timeout(CANCEL_GRACE_SECONDS):
            await asyncio.gather(*closing, return_exceptions=True)
    _kill(handles)


async def run_batch_on_ray(
    episodes: Iterable[Episode],
    *,
    factory: str,
    store: StoreOpener,
    address: str | None,
    concurrency: int,
    workers: int | None = None,
    local_store_path: Path | None = None,
    shared_disk: bool = False,
    total: int | None = None,
    observers: Sequence[ReportObserver] = (),
    control: BatchControl | None = None,
    wrap_factory: FactoryWrapping | None = None,
) -> BatchSummary:
    """One pass over ``episodes`` on the Ray cluster at ``address``.

    ``factory`` is the ``module:factory`` name every worker imports; ``store`` opens the batch's
    store in each worker (picklable). ``address`` ``None`` uses the Ray connection this process
    already has. ``workers`` worker processes (default: one per CPU of the cluster) each drive
    up to ``concurrency`` episodes at a time. Pass ``local_store_path`` when the store is files
    on a disk (sqlite, jsonl): the batch is then refused unless every node runs on this host,
    or ``shared_disk`` says they share that disk, and every worker must read back a file
    written beside the store. ``wrap_factory`` (:data:`FactoryWrapping`): what each worker
    wraps the loaded factory in, built in the worker and closed when it closes.
    """
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigurationError(f"concurrency must be an int >= 1, got {concurrency!r}.")
    connected_here = not ray.is_initialized()
    if connected_here:
        _check_reachable(address)
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
        except Exception as error:
            raise WorkerSetupError(
                f"cannot connect to the Ray cluster at {address!r} ({describe_error(error)}); "
                "start it with `ray start --head` or check the address."
            ) from None
    check: DiskCheck | None = None
    try:
        if local_store_path is not None:
            _check_hosts(local_store_path, shared_disk)
            check = _write_check(local_store_path)
        count = workers if workers is not None else max(1, int(_cluster_resources()["CPU"]))
        handles = await _start_workers(count, factory, store, check, concurrency, wrap_factory)
        try:
            return await run_episodes(
                episodes,
                RayEpisodeDriver(handles, concurrency),
                concurrency=concurrency * count,
                total=total,
                observers=observers,
                control=control,
            )
        finally:
            await _close_workers(handles)
    finally:
        if check is not None:
            with contextlib.suppress(OSError):
                os.unlink(check.path)
        if connected_here:
            ray.shutdown()
