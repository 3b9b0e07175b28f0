"""``polyloop batch``: drive every episode of a JSON Lines file, here or on a Ray cluster.

Nothing here imports Ray: ``--ray`` loads ``polyloop.batch.ray`` when it is given.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from polyloop.batch import (
    BatchControl,
    BatchSummary,
    Episode,
    EpisodeAgent,
    EpisodeFactory,
    EpisodesFile,
    EpisodesFileError,
    EpisodeStatus,
    FactoryError,
    ReportObserver,
    ResultsFile,
    WorkerSetupError,
    check_episodes_file,
    load_factory,
    open_agent,
    run_batch,
)
from polyloop.batch.errors import BatchError
from polyloop.errors import ConfigurationError
from polyloop.ports import RunStore
from polyloop.stores.urls import shown_url
from polyloop_cli.rendering.batch_progress import progress_observer
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.command_kit import json_option_saying, store_option_saying
from polyloop_cli.shared.errors import CliError, ExitCode
from polyloop_cli.shared.stores import (
    FILE_SCHEMES,
    StoreUrl,
    default_store_url,
    open_store,
    parse_store_url,
)

if TYPE_CHECKING:  # OpenTelemetry is an extra: imported only where --otlp is given
    from polyloop.adapters.otel import OpenTelemetryEventSink

__all__ = ["batch"]


def _results_path(episodes: Path) -> Path:
    """``runs.jsonl`` → ``runs-results.jsonl``, beside the episodes file."""
    return episodes.with_name(f"{episodes.stem}-results.jsonl")


def _absolute(url: StoreUrl) -> StoreUrl:
    """The same store with an absolute path, so that workers in other directories find it."""
    if url.kind in FILE_SCHEMES and url.path is not None:
        return StoreUrl.of_file(url.kind, url.path.absolute())
    return url


def _store_opener(url: StoreUrl) -> Callable[[], AbstractAsyncContextManager[RunStore]]:
    """A picklable zero-argument callable opening (and creating) the store at ``url``."""
    return functools.partial(open_store, url, create=True)


@click.command()
@click.argument("episodes_file", metavar="EPISODES.jsonl", type=click.Path(path_type=Path))
@click.option(
    "--agent",
    "agent",
    metavar="MODULE:FACTORY",
    required=True,
    help="The callable that builds an episode's agent: factory(episode, store) (looked up "
    "from the current directory first).",
)
@store_option_saying(
    "Store URL (sqlite:///abs/file.sqlite, jsonl:rel/dir, ...). Default: $POLYLOOP_STORE, "
    "else the demo store. Created when missing."
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Episodes driven at once (with --ray: per worker).",
)
@click.option(
    "--results",
    "results",
    metavar="FILE",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Where each episode's outcome goes, one JSON line each. Default: "
    "EPISODES-results.jsonl beside the episodes file.",
)
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    default=None,
    help="Spread the episodes over the Ray cluster at ADDRESS (host:port, or auto); needs "
    "polyloop-batch[ray].",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="With --ray: worker processes (default: one per CPU of the cluster).",
)
@click.option(
    "--shared-disk",
    is_flag=True,
    help="With --ray and a sqlite/jsonl store: every node mounts the store's disk at the same "
    "path with working POSIX locks (needed when nodes are on other hosts).",
)
@click.option(
    "--otlp",
    "otlp",
    metavar="URL",
    default=None,
    help="Send the batch's metrics (episodes done/failed/parked, steps, steps/s) and the "
    "episodes' traces to the OpenTelemetry collector at URL (OTLP/HTTP, e.g. "
    "http://127.0.0.1:4318; with --ray each worker sends its episodes' traces itself, so URL "
    "must be reachable from every node); needs polyloop-cli[otel].",
)
@json_option_saying("Print the summary as one JSON document.")
def batch(
    episodes_file: Path,
    agent: str,
    store: str | None,
    concurrency: int,
    results: Path | None,
    ray_address: str | None,
    workers: int | None,
    shared_disk: bool,
    otlp: str | None,
    as_json: bool,
) -> None:
    """Drive every episode of EPISODES.jsonl: start new ones, resume crashed ones, count
    finished ones; rerun the same command to continue after a crash or Ctrl-C."""
    if ray_address is None and (workers is not None or shared_disk):
        raise click.UsageError("--workers and --shared-disk go with --ray ADDRESS.")
    output = Output(as_json=as_json)
    try:
        episodes = check_episodes_file(episodes_file)
    except EpisodesFileError as error:
        raise CliError(ExitCode.BAD_EPISODES, str(error)) from None
    # With --ray only the workers need the factory: they import it, and refuse it, themselves.
    factory = _load(agent) if ray_address is None else None
    url = _absolute(parse_store_url(store if store is not None else default_store_url()))
    results_path = results if results is not None else _results_path(episodes_file)
    rerun = suggest("batch", *sys.argv[2:]) if sys.argv[1:2] == ["batch"] else None
    metrics = None if otlp is None else _batch_metrics(otlp, episodes_file)
    summary = asyncio.run(
        _drive(
            episodes,
            factory,
            agent,
            url,
            concurrency,
            results_path,
            ray_address,
            workers,
            shared_disk,
            output,
            metrics,
        )
    )
    _print_summary(output, summary, episodes, results_path)
    if summary.interrupted:
        raise KeyboardInterrupt
    parked = summary.count(EpisodeStatus.PARKED)
    if (
        not summary.complete
        and parked == summary.done - _finished(summary)
        and not (summary.not_launched)
    ):
        # Only parked episodes keep the batch from completing: they wait for a person.
        store_words = () if store is None else ("--store", shown_url(store.strip()))
        raise CliError(
            ExitCode.BATCH_PARKED,
            f"{parked} episode(s) wait for a person; decide them "
            f"(`{suggest('pending', *store_words)}`), then rerun the same "
            "command to continue them" + (f": {rerun}" if rerun else "."),
        )
    if not summary.complete:
        raise CliError(
            ExitCode.BATCH_INCOMPLETE,
            f"{_incomplete(summary)}; see {results_path}, then rerun the same command to "
            "continue" + (f": {rerun}" if rerun else "."),
        )


class _Telemetry:
    """The batch's OpenTelemetry telemetry: a metrics observer, the episodes' traces (each
    agent's events also go to one sink, beside its own, design 0062), and the exporters to
    close at the end."""

    def __init__(self, url: str, batch: str) -> None:
        from polyloop.adapters.otel import OtlpTelemetry

        self._telemetry = OtlpTelemetry(
            url, service_name="polyloop-batch", export_interval_seconds=5.0
        )
        self.observer: ReportObserver = self._telemetry.batch_metrics(batch=batch)
        self._sink = self._telemetry.event_sink()
        #: Where the Ray workers send their episodes' traces (each builds its own exporter).
        self.url = url

    def traced(self, factory: EpisodeFactory) -> EpisodeFactory:
        """``factory``, its agents' events also sent to the telemetry."""
        return _traced(factory, self._sink)

    def close(self) -> None:
        self._telemetry.shutdown()


def _traced(factory: EpisodeFactory, sink: OpenTelemetryEventSink) -> EpisodeFactory:
    """``factory``, its agents' events also sent to ``sink`` (their parameter snapshots
    unchanged: a batch rerun with or without ``--otlp`` resumes the same runs)."""
    from polyloop.adapters.otel import observe

    @contextlib.asynccontextmanager
    async def traced(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
        async with open_agent(factory, episode, store) as agent:
            yield EpisodeAgent(observe(agent.definition, sink), agent.request)

    return traced


@contextlib.contextmanager
def worker_traces(url: str) -> Iterator[Callable[[EpisodeFactory], EpisodeFactory]]:
    """In a Ray worker of ``batch --ray --otlp URL``: the worker's own trace exporter to
    ``URL`` (the batch's metrics are the driver's), wrapping the factory it loaded; flushed and
    shut down when the worker closes (design 0074)."""
    from polyloop.adapters.otel import OtlpTelemetry

    telemetry = OtlpTelemetry(url, service_name="polyloop-batch", metrics=False)
    try:
        sink = telemetry.event_sink()
        yield functools.partial(_traced, sink=sink)
    finally:
        telemetry.shutdown()


def _batch_metrics(url: str, episodes_file: Path) -> _Telemetry:
    try:
        import polyloop.adapters.otel  # noqa: F401
    except ImportError as error:
        raise CliError(
            ExitCode.USAGE,
            "--otlp needs OpenTelemetry; install it with `pip install 'polyloop-cli[otel]'`.",
            detail=str(error),
        ) from None
    try:
        return _Telemetry(url, episodes_file.stem)
    except ConfigurationError as error:
        raise CliError(ExitCode.USAGE, f"--otlp: {error}") from None


def _load(spec: str) -> EpisodeFactory:
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")  # module:factory is looked up from the current directory
    try:
        return load_factory(spec)
    except FactoryError as error:
        raise CliError(ExitCode.BAD_FACTORY, str(error)) from None


def _finished(summary: BatchSummary) -> int:
    return sum(summary.count(status) for status in EpisodeStatus if status.finished)


def _incomplete(summary: BatchSummary) -> str:
    parts = []
    for status, one, many in (
        ("error", "failed", "failed"),
        (
            "skipped",
            "was skipped (another driver held it)",
            "were skipped (other drivers held them)",
        ),
        ("cancelled", "was cancelled", "were cancelled"),
        ("parked", "waits for a person", "wait for a person"),
    ):
        count = summary.by_status.get(status, 0)
        if count:
            parts.append(f"1 episode {one}" if count == 1 else f"{count} episodes {many}")
    return "; ".join(parts) or "the batch is incomplete"


async def _drive(
    episodes: EpisodesFile,
    factory: EpisodeFactory | None,
    agent: str,
    url: StoreUrl,
    concurrency: int,
    results_path: Path,
    ray_address: str | None,
    workers: int | None,
    shared_disk: bool,
    output: Output,
    metrics: _Telemetry | None = None,
) -> BatchSummary:
    control = BatchControl()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGINT, functools.partial(_interrupted, control, output))
    try:
        with ResultsFile(results_path) as results:
            async with progress_observer(output, episodes) as shown:
                observers: list[ReportObserver] = [results, shown]
                if metrics is not None:
                    observers.append(metrics.observer)
                if ray_address is not None:
                    return await _on_ray(
                        episodes,
                        agent,
                        url,
                        concurrency,
                        ray_address,
                        workers,
                        shared_disk,
                        observers,
                        control,
                        None if metrics is None else metrics.url,
                    )
                assert factory is not None
                if metrics is not None:
                    factory = metrics.traced(factory)
                async with open_store(url, create=True) as store:
                    return await run_batch(
                        episodes.episodes(),
                        factory,
                        store,
                        concurrency=concurrency,
                        total=episodes.count,
                        observers=observers,
                        control=control,
                    )
    except EpisodesFileError as error:  # the file changed since it was checked
        raise CliError(ExitCode.BAD_EPISODES, str(error)) from None
    except WorkerSetupError as error:
        raise CliError(ExitCode.BATCH_WORKERS, str(error)) from None
    except FactoryError as error:
        raise CliError(ExitCode.BAD_FACTORY, str(error)) from None
    except BatchError as error:  # the results file cannot be written
        raise CliError(ExitCode.USAGE, str(error)) from None
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        if metrics is not None:  # sends the last measurements, bounded by the export timeout
            await asyncio.to_thread(metrics.close)


async def _on_ray(
    episodes: EpisodesFile,
    agent: str,
    url: StoreUrl,
    concurrency: int,
    address: str,
    workers: int | None,
    shared_disk: bool,
    observers: Sequence[ReportObserver],
    control: BatchControl,
    otlp: str | None = None,
) -> BatchSummary:
    try:
        from polyloop.batch.ray import run_batch_on_ray
    except ImportError as error:
        raise CliError(
            ExitCode.BATCH_WORKERS,
            "--ray needs Ray; install it with `pip install 'polyloop-batch[ray]'` on this "
            "machine and on every node of the cluster.",
            detail=str(error),
        ) from None
    # Open (and create) the store here first: a bad store fails before any worker starts.
    async with open_store(url, create=True):
        pass
    return await run_batch_on_ray(
        episodes.episodes(),
        factory=agent,
        store=_store_opener(url),
        address=address,
        workers=workers,
        concurrency=concurrency,
        local_store_path=url.path if url.kind in FILE_SCHEMES else None,
        shared_disk=shared_disk,
        total=episodes.count,
        observers=observers,
        control=control,
        # Each worker builds its own exporter from the URL: an exporter does not cross processes.
        wrap_factory=None if otlp is None else functools.partial(worker_traces, otlp),
    )


def _interrupted(control: BatchControl, output: Output) -> None:
    if control.stopping:
        message = "cancelling the episodes in flight; each records 'cancelled'."
    else:
        message = (
            "stopping: no new episodes; those in flight finish (Ctrl-C again cancels them). "
            "Rerun the same command to continue."
        )
    control.interrupt()
    if not output.as_json:
        output.err.print(f"polyloop batch: {message}", markup=False, highlight=False)


def _print_summary(
    output: Output, summary: BatchSummary, episodes: EpisodesFile, results_path: Path
) -> None:
    if output.as_json:
        document = summary.to_json_dict()
        document["episodes_file"] = str(episodes.path)
        document["results_file"] = str(results_path)
        output.json(document)
        return
    print_line = functools.partial(output.out.print, markup=False, highlight=False)
    by_status = "  ".join(
        f"{status} {count}" for status, count in summary.to_json_dict()["by_status"].items()
    )
    print_line(
        f"Batch {episodes.path}: {summary.done} of {summary.total} episodes in "
        f"{summary.wall_seconds:.1f} s, {summary.steps} steps driven "
        f"({summary.steps_per_second:.1f} steps/s)."
    )
    print_line(f"  {by_status}")
    usage = summary.model_usage
    if usage.calls:
        tokens = f", {usage.tokens:,} tokens" if usage.tokens else ""
        print_line(
            f"  model: {usage.calls} calls, {usage.requests} requests "
            f"({usage.retries} retries){tokens}"
        )
    if summary.by_stop_reason:
        reasons = "  ".join(
            f"{reason} {count}" for reason, count in sorted(summary.by_stop_reason.items())
        )
        print_line(f"  stop reasons: {reasons}")
    if summary.not_launched:
        print_line(f"  not started (the batch was stopped): {summary.not_launched}")
    error_count = summary.by_status.get("error", 0)
    if error_count:
        print_line(f"Errors ({error_count}; every one is in the results file):")
        for item in summary.errors:
            print_line(f"  {json.dumps(item.run_id)}: {item.error.splitlines()[0]}")
    skipped_count = summary.by_status.get("skipped", 0)
    if skipped_count:
        names = ", ".join(json.dumps(run_id) for run_id in summary.skipped)
        more = (
            f" and {skipped_count - len(summary.skipped)} more"
            if skipped_count > len(summary.skipped)
            else ""
        )
        print_line(f"Skipped, another driver held the run ({skipped_count}): {names}{more}")
    parked_count = summary.count(EpisodeStatus.PARKED)
    if parked_count:
        names = ", ".join(json.dumps(run_id) for run_id in summary.parked)
        more = (
            f" and {parked_count - len(summary.parked)} more"
            if parked_count > len(summary.parked)
            else ""
        )
        print_line(f"Waiting for a person, parked ({parked_count}): {names}{more}")
    print_line(f"Results: {results_path}")
