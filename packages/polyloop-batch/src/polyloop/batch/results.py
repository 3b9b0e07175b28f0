"""The results file: one JSON line per episode, written as each episode's pass ends."""

from __future__ import annotations

import os
from types import TracebackType
from typing import IO

from polyloop.batch.errors import BatchError
from polyloop.batch.reports import EpisodeReport
from polyloop.batch.summary import BatchTally

__all__ = ["ResultsFile"]


class ResultsFile:
    """Writes each report as a line of ``path`` and flushes it at once.

    The file is started afresh by every pass: a pass reports every episode of the batch —
    finished ones as ``recorded`` — so after a rerun the file is complete again. It is not
    synced: the run logs are the durable record; this file is their index for scripts.
    Use as a context manager, and pass the object as an observer of the pass.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        self._handle: IO[str] | None = None

    def __enter__(self) -> ResultsFile:
        try:
            self._handle = open(self.path, "w", encoding="utf-8", newline="\n")
        except OSError as error:
            raise BatchError(
                f"cannot write the results file {self.path} ({error.strerror or error}); "
                "choose a writable path with --results."
            ) from None
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __call__(self, report: EpisodeReport, tally: BatchTally) -> None:
        assert self._handle is not None, "ResultsFile is written inside its `with` block"
        self._handle.write(report.to_json() + "\n")
        self._handle.flush()
