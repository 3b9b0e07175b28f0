"""Batches of episodes over ``polyloop.session``: thousands of runs, each driven exactly once.

Each episode has a stable ``run_id``; a pass starts new runs, resumes crashed ones, counts
finished ones by their recorded result (when their parameter snapshot still matches) and skips,
after retrying, runs another driver holds. The user's factory builds each episode's agent (and
opens and closes its executor). ``polyloop.batch.ray`` (extra ``polyloop-batch[ray]``) spreads a
batch over a Ray cluster; nothing else here imports Ray.
"""

from __future__ import annotations

from polyloop.batch.agents import (
    EpisodeAgent,
    EpisodeFactory,
    FactoryResult,
    load_factory,
    open_agent,
)
from polyloop.batch.driving import EpisodeDriver, LocalEpisodeDriver
from polyloop.batch.episodes import Episode, EpisodesFile, ForkPoint, check_episodes_file
from polyloop.batch.errors import BatchError, EpisodesFileError, FactoryError, WorkerSetupError
from polyloop.batch.passes import BatchControl, ReportObserver, run_episodes
from polyloop.batch.reports import (
    RESULTS_SCHEMA_VERSION,
    EpisodeReport,
    EpisodeStatus,
    ModelUsage,
)
from polyloop.batch.results import ResultsFile
from polyloop.batch.runner import run_batch
from polyloop.batch.summary import BatchSummary, BatchTally, EpisodeError

__all__ = [
    "RESULTS_SCHEMA_VERSION",
    "BatchControl",
    "BatchError",
    "BatchSummary",
    "BatchTally",
    "Episode",
    "EpisodeAgent",
    "EpisodeDriver",
    "EpisodeError",
    "EpisodeFactory",
    "EpisodeReport",
    "EpisodeStatus",
    "EpisodesFile",
    "EpisodesFileError",
    "FactoryError",
    "FactoryResult",
    "ForkPoint",
    "LocalEpisodeDriver",
    "ModelUsage",
    "ReportObserver",
    "ResultsFile",
    "WorkerSetupError",
    "check_episodes_file",
    "load_factory",
    "open_agent",
    "run_batch",
    "run_episodes",
]
