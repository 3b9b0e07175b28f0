"""The errors of the batch runner, all under :class:`polyloop.errors.PolyLoopError`."""

from __future__ import annotations

from polyloop.errors import PolyLoopError

__all__ = ["BatchError", "EpisodesFileError", "FactoryError", "WorkerSetupError"]


class BatchError(PolyLoopError):
    """A batch could not start, or one episode's agent could not be built as asked."""


class EpisodesFileError(BatchError):
    """The episodes file cannot be used; the message names the file and the line.

    Raised before anything is started: a batch with a bad episodes file runs no episode.
    """

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message)
        #: The 1-based line the problem is on; ``None`` when it concerns the whole file.
        self.line = line

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_episodes_file_error, (self.args[0], self.line))


def _rebuild_episodes_file_error(message: str, line: int | None) -> EpisodesFileError:
    return EpisodesFileError(message, line=line)


class FactoryError(BatchError):
    """The ``module:factory`` cannot be loaded, or what it built for an episode is unusable."""


class WorkerSetupError(BatchError):
    """The workers of a distributed batch cannot serve it (they cannot import the factory,
    cannot reach the store, or do not share the disk a file store lives on)."""
