"""Episodes, and the JSON Lines file that lists them.

An episodes file has one JSON object per line. Its ``run_id`` (a non-empty string, unique in the
file) names the episode's run in the store, so it must stay the same from one pass to the next:
build it from what identifies the episode (``"swe-bench/django-1234/attempt-0"``), never from a
time or a counter of the pass. Everything else on the line is the episode's own data, handed to
the factory untouched. Blank lines are ignored.

An episode may name a fork point (design 0067): ``"fork_of"`` (the source run, recorded in the
same store) and ``"fork_at"`` (the step its agent takes first) make it a fork of that run
instead of a run from step 0; ``"fork_in_doubt_observation"`` is ``fork``'s explicit choice for
a source whose step before the fork point is in doubt.

The file is read twice: :func:`check_episodes_file` reads all of it before anything starts (so
a bad line stops the batch while nothing has run) and counts it; :meth:`EpisodesFile.episodes`
then streams it, so a pass never holds more than the episodes in flight.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from polyloop.batch.errors import EpisodesFileError

__all__ = ["Episode", "EpisodesFile", "ForkPoint", "check_episodes_file", "parse_episode_line"]

#: How much of a bad line an error quotes.
_QUOTED_CHARS = 60


@dataclass(frozen=True, slots=True)
class Episode:
    """One episode: the run it is recorded as, and the data its agent is built from."""

    #: The run's id in the store; stable across passes, unique in the batch.
    run_id: str
    #: The episode's line as parsed (``run_id`` included): the factory reads what it needs.
    data: Mapping[str, Any]

    @property
    def fork_point(self) -> ForkPoint | None:
        """Where the episode forks its source run (``fork_of``/``fork_at``), or ``None``."""
        if "fork_of" not in self.data and "fork_at" not in self.data:
            return None
        return ForkPoint(
            self.data["fork_of"],
            self.data["fork_at"],
            self.data.get("fork_in_doubt_observation"),
        )


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """An episode's fork point: its source run and the step its own agent takes first."""

    source_run_id: str
    at_step: int
    in_doubt_observation: str | None = None


@dataclass(frozen=True, slots=True)
class EpisodesFile:
    """A checked episodes file: every line parsed, run_ids unique."""

    path: Path
    #: How many episodes it lists.
    count: int

    def episodes(self) -> Iterator[Episode]:
        """The episodes in file order, read as they are asked for."""
        for number, line in _lines(self.path):
            episode = parse_episode_line(line, number, self.path)
            if episode is not None:
                yield episode


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(number, text)`` of every line; a line that is not UTF-8 is refused by number."""
    try:
        with open(path, "rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise EpisodesFileError(
                        f"{_where(path, number)} is not UTF-8 text (byte {error.start + 1}); save "
                        "the file as UTF-8. Nothing was started.",
                        line=number,
                    ) from None
                yield number, text
    except OSError as error:
        raise EpisodesFileError(
            f"cannot read the episodes file {path} ({error.strerror or error}); check the path."
        ) from None


def _where(path: Path, number: int) -> str:
    return f"episodes file {path}, line {number}"


def _quoted(text: str) -> str:
    text = text.strip()
    return repr(text if len(text) <= _QUOTED_CHARS else text[: _QUOTED_CHARS - 1] + "…")


def parse_episode_line(line: str, number: int, path: Path) -> Episode | None:
    """The episode on line ``number`` of ``path``, ``None`` for a blank line, or an
    :class:`EpisodesFileError` naming the line and what is wrong with it."""
    if not line.strip():
        return None
    try:
        data = json.loads(line)
    except ValueError as error:
        column = f" (column {error.colno})" if isinstance(error, json.JSONDecodeError) else ""
        raise EpisodesFileError(
            f"{_where(path, number)} is not JSON{column}: {_quoted(line)}; write one JSON object "
            'per line, such as {"run_id": "task-1/attempt-0"}. Nothing was started.',
            line=number,
        ) from None
    if not isinstance(data, dict):
        raise EpisodesFileError(
            f"{_where(path, number)} holds a JSON {type(data).__name__}, not an object; write "
            'one JSON object per line, such as {"run_id": "task-1/attempt-0"}. Nothing was started.',
            line=number,
        )
    run_id = data.get("run_id")
    if run_id is None:
        raise EpisodesFileError(
            f"{_where(path, number)} has no run_id; give every episode a stable "
            '"run_id" string (e.g. dataset/task/attempt). Nothing was started.',
            line=number,
        )
    if not isinstance(run_id, str) or not run_id:
        raise EpisodesFileError(
            f"{_where(path, number)}: run_id is {json.dumps(run_id)[:_QUOTED_CHARS]}, not a "
            "non-empty string; give every episode a stable run_id string. Nothing was started.",
            line=number,
        )
    try:
        run_id.encode("utf-8")
    except UnicodeEncodeError:
        raise EpisodesFileError(
            f"{_where(path, number)}: run_id {_quoted(run_id)} holds a lone surrogate escape, "
            "which no store can keep; fix the run_id. Nothing was started.",
            line=number,
        ) from None
    _check_fork_point(data, run_id, number, path)
    return Episode(run_id, data)


def _check_fork_point(data: Mapping[str, Any], run_id: str, number: int, path: Path) -> None:
    if "fork_of" not in data and "fork_at" not in data:
        return
    source, at = data.get("fork_of"), data.get("fork_at")
    doubt = data.get("fork_in_doubt_observation")
    if (
        not isinstance(source, str)
        or not source
        or source == run_id
        or type(at) is not int
        or at < 0
        or not (doubt is None or isinstance(doubt, str))
    ):
        raise EpisodesFileError(
            f'{_where(path, number)}: a fork episode needs "fork_of" (another run\'s id) and '
            f'"fork_at" (a step >= 0), got fork_of={json.dumps(source)[:_QUOTED_CHARS]}, '
            f'fork_at={json.dumps(at)[:_QUOTED_CHARS]}; "fork_in_doubt_observation" is a '
            "string when given. Nothing was started.",
            line=number,
        )


def check_episodes_file(path: str | os.PathLike[str]) -> EpisodesFile:
    """Read the whole file once and refuse it, naming the line, when any line is not a JSON
    object with a non-empty string ``run_id`` or a run_id repeats an earlier line's."""
    where = Path(path)
    first_line: dict[str, int] = {}
    for number, line in _lines(where):
        episode = parse_episode_line(line, number, where)
        if episode is None:
            continue
        earlier = first_line.setdefault(episode.run_id, number)
        if earlier != number:
            raise EpisodesFileError(
                f"{_where(where, number)}: run_id {_quoted(episode.run_id)} is already the "
                f"run_id of line {earlier}; every episode needs a run_id of its own. Nothing was "
                "started.",
                line=number,
            )
    return EpisodesFile(where, len(first_line))
