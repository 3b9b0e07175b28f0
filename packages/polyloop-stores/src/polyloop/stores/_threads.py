"""Blocking jobs run on dedicated threads and awaited from the event loop.

A job goes to its thread through a ``queue.SimpleQueue``; its outcome comes back through a
:class:`Completion`. Waking an event loop from another thread (``call_soon_threadsafe``, its
self-pipe, the selector) costs about 70 µs on a small VM, as much again as the ~100 µs
``fdatasync`` that is usually the whole job. So when the event loop has nothing else to do —
no callback ready, no timer due — the caller first waits for the outcome on a plain lock, for at
most ``idle_wait`` seconds (1 ms by default): with nothing else ready, that wait delays nobody,
and it is bounded, so a stalled disk holds the loop for one millisecond before the caller falls
back to awaiting a future and the loop runs on (design 0017).

Threads are daemons started on first use, so a store that is never used starts none, and a
process that forgets to close a store can still exit (a job cut short that way was never
acknowledged).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from polyloop.errors import ConfigurationError, StoreError

__all__ = [
    "DEFAULT_IDLE_WAIT_SECONDS",
    "Completion",
    "QueueThread",
    "WorkerPool",
    "check_idle_wait",
    "settle_all",
]

T = TypeVar("T")
ItemT = TypeVar("ItemT")

#: Longest a caller waits on the event-loop thread for a job's outcome (only while the loop
#: has nothing else ready to run).
DEFAULT_IDLE_WAIT_SECONDS = 0.001


def check_idle_wait(owner: str, idle_wait_ms: float) -> float:
    """Validate a store's ``idle_wait_ms`` argument; return it in seconds."""
    if (
        isinstance(idle_wait_ms, bool)
        or not isinstance(idle_wait_ms, int | float)
        or not 0 <= idle_wait_ms <= 100
    ):
        raise ConfigurationError(
            f"{owner} idle_wait_ms must be a number from 0 to 100 (0: never wait on the event "
            f"loop thread), got {idle_wait_ms!r}."
        )
    return float(idle_wait_ms) / 1000


def _loop_is_idle(loop: asyncio.AbstractEventLoop, within: float) -> bool:
    """Whether no callback is ready and no timer falls due ``within`` seconds.

    Reads the private queues of asyncio's own loops; any other loop counts as never idle, so
    callers there always await.
    """
    ready = getattr(loop, "_ready", None)
    scheduled = getattr(loop, "_scheduled", None)
    if ready is None or scheduled is None or ready:
        return False
    return not scheduled or scheduled[0].when() > loop.time() + within


def _deliver(future: asyncio.Future[Any], result: object, error: BaseException | None) -> None:
    if future.cancelled():
        return  # the caller stopped waiting; the job itself still ran to its end
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _deliver_many(outcomes: list[tuple[asyncio.Future[Any], object, BaseException | None]]) -> None:
    for future, result, error in outcomes:
        _deliver(future, result, error)


class Completion:
    """The outcome of one job: set once by a worker thread, taken once by the caller."""

    __slots__ = ("_done", "_future", "_guard", "_loop", "_outcome")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()  # released by the worker when the outcome is in
        self._guard = threading.Lock()
        self._outcome: tuple[object, BaseException | None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[Any] | None = None

    def record(
        self, result: object, error: BaseException | None
    ) -> tuple[asyncio.AbstractEventLoop, asyncio.Future[Any]] | None:
        """Record the outcome; return where to deliver it if the caller is awaiting a future."""
        with self._guard:
            self._outcome = (result, error)
            waiting = None if self._future is None else (self._loop, self._future)
        self._done.release()
        return waiting  # type: ignore[return-value]

    def settle(self, result: object, error: BaseException | None) -> None:
        """Worker side: hand over the outcome (from any thread; a closed loop is ignored)."""
        waiting = self.record(result, error)
        if waiting is not None:
            loop, future = waiting
            # A closed loop raises RuntimeError: nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_deliver, future, result, error)

    async def wait(self, idle_wait: float) -> Any:
        """Caller side: the job's result, or raise its exception."""
        loop = asyncio.get_running_loop()
        if idle_wait > 0 and _loop_is_idle(loop, idle_wait):
            self._done.acquire(timeout=idle_wait)
        with self._guard:
            outcome = self._outcome
            if outcome is None:
                self._loop = loop
                self._future = future = loop.create_future()
        if outcome is None:
            return await future
        result, error = outcome
        if error is not None:
            raise error
        return result


def settle_all(outcomes: Iterable[tuple[Completion, object, BaseException | None]]) -> None:
    """Settle many completions with one event-loop wake-up per loop instead of one each."""
    by_loop: dict[
        asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], object, BaseException | None]]
    ] = {}
    for completion, result, error in outcomes:
        waiting = completion.record(result, error)
        if waiting is not None:
            loop, future = waiting
            by_loop.setdefault(loop, []).append((future, result, error))
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_deliver_many, items)


class Job:
    """One call waiting for a thread: the function, its arguments and where the answer goes."""

    __slots__ = ("args", "completion", "function")

    def __init__(
        self, completion: Completion, function: Callable[..., Any], args: tuple[object, ...]
    ) -> None:
        self.completion = completion
        self.function = function
        self.args = args

    def execute(self) -> tuple[object, BaseException | None]:
        """Call the function; return its result or the exception it raised."""
        try:
            return self.function(*self.args), None
        except BaseException as error:
            return None, error


class WorkerPool:
    """``size`` threads taking jobs from one queue, in submission order."""

    def __init__(
        self, name: str, size: int, *, idle_wait: float = DEFAULT_IDLE_WAIT_SECONDS
    ) -> None:
        self._name = name
        self._size = size
        self._idle_wait = idle_wait
        self._queue: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._idle = 0
        self._closed = False

    async def run(self, function: Callable[..., T], *args: object) -> T:
        """Run ``function(*args)`` on a pool thread and return (or raise) what it did."""
        completion = Completion()
        with self._lock:
            if self._closed:
                raise StoreError(
                    f"{self._name} is closed; open a new store on the same storage to continue."
                )
            # A new thread only when none is waiting (approximately: a thread about to wait
            # counts as busy): one sequential caller keeps using one thread.
            if self._idle == 0 and len(self._threads) < self._size:
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            self._queue.put(Job(completion, function, args))
        result: T = await completion.wait(self._idle_wait)
        return result

    def _work(self) -> None:
        with self._lock:
            self._idle += 1
        while True:
            job = self._queue.get()
            with self._lock:
                self._idle -= 1
            if job is None:
                return
            result, error = job.execute()
            # Count this thread idle before the caller can learn the result and submit its
            # next job, so a sequential caller keeps reusing this one thread.
            with self._lock:
                self._idle += 1
            job.completion.settle(result, error)

    def close(self) -> None:
        """Finish the queued jobs, then stop every thread. Blocks until they are done."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = list(self._threads)
        for _ in threads:
            self._queue.put(None)
        for thread in threads:
            thread.join()


class QueueThread(Generic[ItemT]):
    """One thread taking items from one FIFO queue, started on first use: a store's single
    writer. The subclass's ``_work`` takes the items: its own (``ItemT``), a bare
    :class:`Completion` (:meth:`open`: connect now, to surface errors early, and settle it),
    and ``None`` (stop). ``_closed_down`` releases what the thread used, once it has ended."""

    def __init__(self, name: str, closed_advice: str, idle_wait: float) -> None:
        self._name = name
        #: What a use after closing is told (appended to "<name> is closed").
        self._closed_advice = closed_advice
        self._idle_wait = idle_wait
        self._queue: queue.SimpleQueue[ItemT | Completion | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def _work(self) -> None:
        raise NotImplementedError

    def _closed_down(self) -> None:
        raise NotImplementedError

    async def open(self) -> None:
        """Connect now (creating the schema), raising what connecting raises."""
        completion = Completion()
        await self._submit(completion, completion)

    def close(self) -> None:
        """Finish what is queued, stop the thread, then release what it used. Blocks."""
        if self._stop():
            self._closed_down()

    def _put(self, item: ItemT | Completion) -> None:
        with self._lock:
            if self._closed:
                raise StoreError(f"{self._name} is closed{self._closed_advice}")
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
            self._queue.put(item)

    async def _submit(self, item: ItemT | Completion, completion: Completion) -> Any:
        """Queue ``item``; return (or raise) the outcome the thread gives ``completion``."""
        self._put(item)
        return await completion.wait(self._idle_wait)

    def _stop(self) -> bool:
        """Refuse new items, let the thread finish the queued ones, and wait for it to end.
        ``False`` when it was stopped already. Blocks."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(None)
            thread.join()
        return True
