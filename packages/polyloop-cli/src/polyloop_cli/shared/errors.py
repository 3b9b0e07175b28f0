"""The errors a user of the ``polyloop`` command can cause, each with its own exit code.

Every one is reported as a single line saying what to do, never as a traceback. The codes are
part of the command's interface (scripts branch on them): see ``research-wiki/design/0015-cli.md``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Generic, TypeVar

__all__ = [
    "HEADLINE_LIMIT",
    "CliError",
    "ExitCode",
    "Refusal",
    "json_object_option",
    "refusals",
    "shown_id",
]

E = TypeVar("E", bound=Exception)


class ExitCode(IntEnum):
    """Exit codes of the ``polyloop`` command. ``2`` is click's own usage error."""

    OK = 0
    #: An unexpected error inside the command (a bug): reported in one line, not a traceback.
    INTERNAL = 1
    #: Wrong options or arguments (click's convention).
    USAGE = 2
    #: The ``--store`` value is not a store URL this command understands.
    BAD_STORE_URL = 3
    #: The store named by the URL does not exist (no such file or directory).
    STORE_NOT_FOUND = 4
    #: The store holds no run with this run_id.
    RUN_NOT_FOUND = 5
    #: A run log is corrupt (structurally invalid, or unreadable records).
    CORRUPT_LOG = 6
    #: The store exists but cannot be read (permissions, not a store, locked, I/O error).
    STORE_UNREADABLE = 7
    #: The model endpoint failed (demo with ``--base-url``): unreachable, HTTP error, bad body.
    MODEL_ERROR = 8
    #: The demo could not stage its crash (the worker ended or hung before the crash point).
    DEMO_FAILED = 9
    #: ``approve``/``reject``/``edit``/``answer``: the run waits on no ask (none was made, it
    #: is decided already, the run finished); nothing was written.
    ASK_NOT_PENDING = 10
    #: A decision bound (``--sha256``) to another ask than the pending one: its arguments,
    #: tool schema or policy changed since it was shown; nothing was written.
    STALE_ASK = 11
    #: Another process drives or decides the run right now (its lease is held).
    RUN_BUSY = 12
    #: The decision does not fit the ask (approving a question, edited arguments the tool's
    #: schema refuses, a rejection without a reason); nothing was written.
    DECISION_REFUSED = 13
    #: ``resume``: the run parked again, on a new ask (``polyloop pending`` shows it).
    PARKED = 14
    #: ``resume``: the agent given is not the one the run started with (its parameters differ).
    RESUME_REFUSED = 15
    #: ``batch`` ended with episodes that failed, were skipped or were cancelled (summary
    #: printed; rerun the same command to continue). Numbers from 20 are the batch's own.
    BATCH_INCOMPLETE = 20
    #: ``batch``: the episodes file is unusable (not JSON, a bad or repeated run_id).
    BAD_EPISODES = 21
    #: ``batch``: ``--agent module:factory`` cannot be imported or is not callable.
    BAD_FACTORY = 22
    #: ``batch --ray``: Ray is missing or unreachable, or its workers cannot serve the batch
    #: (cannot import the factory, do not share the disk of a file store).
    BATCH_WORKERS = 23
    #: ``batch`` ended with every episode finished or parked, some parked: they wait for a
    #: person (``polyloop pending``); decide them, then rerun the same command.
    BATCH_PARKED = 24


#: The longest a headline may be (what happened, to what, what to do), before any detail.
HEADLINE_LIMIT = 200
#: Run ids in messages are cut to this many characters (a run_id may be 10 kB long).
SHOWN_ID_LIMIT = 60


def json_object_option(text: str, option: str, advice: str, what: str = "") -> dict[str, Any]:
    """The JSON object an option's value holds, else exit 2: ``<option> is not JSON (…);
    <advice>`` or ``<option> must be a JSON object<what>, got <type>.``"""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CliError(
            ExitCode.USAGE,
            f"{option} is not JSON ({error.msg} at column {error.colno}); {advice}",
        ) from None
    if not isinstance(value, dict):
        raise CliError(
            ExitCode.USAGE, f"{option} must be a JSON object{what}, got {type(value).__name__}."
        )
    return value


def shown_id(run_id: str) -> str:
    """``run_id`` quoted for a message, cut short when it is very long."""
    text = repr(run_id)
    return text if len(text) <= SHOWN_ID_LIMIT else text[: SHOWN_ID_LIMIT - 1] + "…"


class CliError(Exception):
    """A user-caused failure: the exit code of its class and one line of text.

    ``message`` is the headline: what happened, to which store or run, and what to do, in at
    most :data:`HEADLINE_LIMIT` characters. ``detail`` (optional) is what a lower layer said,
    printed after the headline so that it never pushes the advice out of sight.
    """

    def __init__(self, code: ExitCode, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail

    @property
    def kind(self) -> str:
        return self.code.name.lower()

    @property
    def line(self) -> str:
        """The whole report on one line: the headline, then ``Detail: …`` if there is one."""
        text = " ".join(self.message.split())
        if self.detail:
            text += " Detail: " + " ".join(self.detail.split())
        return text


@dataclass(frozen=True, slots=True)
class Refusal(Generic[E]):
    """A refusal of the library (an error of ``kind``) and the :class:`CliError` a command
    reports for it, built from the error (its text is usually the detail)."""

    kind: type[E]
    error: Callable[[E], CliError]


@contextmanager
def refusals(*mapped: Refusal[Any]) -> Iterator[None]:
    """Within the block, an error of a mapped kind ends as its command's :class:`CliError`
    (the first kind it is an instance of, in the order given); any other error goes through."""
    try:
        yield
    except tuple(refusal.kind for refusal in mapped) as error:
        refusal = next(refusal for refusal in mapped if isinstance(error, refusal.kind))
        raise refusal.error(error) from None
