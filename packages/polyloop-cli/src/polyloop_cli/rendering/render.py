"""Terminal output: rich tables and colour on a TTY, plain columns when piped, or JSON.

Colour and box drawing appear only when the stream is a terminal (and ``NO_COLOR`` is unset);
piped output has no escape codes and no line wrapping, so ``grep`` and ``awk`` work on it,
unless ``COLUMNS`` asks for a width: then it is laid out for that width as on a terminal.

On a terminal a table fits the terminal's width (``COLUMNS``, else the terminal's own). Each
column says how it may give way (:class:`Fit`): identifiers, numbers and states never do (an id
broken over two lines cannot be copied); free text is cut to one line with ``…`` or folded over
several lines. ``show --full`` is where nothing is cut.

Every text goes through :func:`polyloop_cli.rendering.redaction.scrub` first: no store URL's password is
ever printed.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from polyloop_cli.rendering.invocation import command_lines
from polyloop_cli.rendering.redaction import scrub

__all__ = ["Column", "Fit", "Output", "status_text"]

#: Width used when the stream is not a terminal: wide enough that no row wraps.
PIPED_WIDTH = 100_000
#: Spaces between two columns (one of padding, one of the box's invisible divider).
GAP = 2
#: A free-text column is never made narrower than this, even if the row then overflows.
MIN_FREE_TEXT = 8


class Fit(Enum):
    """How a column gives way when a table is wider than the terminal."""

    #: Never: ids, numbers, states, names (the other columns make room).
    KEEP = "keep"
    #: Free text cut to one line, ending in ``…``.
    TRUNCATE = "truncate"
    #: Free text folded over as many lines as it needs, at word boundaries.
    FOLD = "fold"


@dataclass(frozen=True, slots=True)
class Column:
    header: str
    fit: Fit = Fit.KEEP
    style: str = ""


def piped_columns() -> int | None:
    """``COLUMNS`` as a width, when set to one: the width a user asks of piped output."""
    value = os.environ.get("COLUMNS", "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def _console(stream: TextIO) -> Console:
    terminal = stream.isatty()
    width = None if terminal else piped_columns()
    return Console(
        file=stream,
        highlight=False,
        soft_wrap=not terminal and width is None,
        width=width if terminal or width is not None else PIPED_WIDTH,
    )


class Output:
    """Where a command writes: ``out`` for results, ``err`` for diagnostics."""

    def __init__(self, *, as_json: bool) -> None:
        self.as_json = as_json
        self.out = _console(sys.stdout)
        self.err = _console(sys.stderr)

    @property
    def terminal(self) -> bool:
        return self.out.is_terminal

    @property
    def columns(self) -> int | None:
        """The width lines are laid out for: the terminal's (``COLUMNS``, else its own), or
        ``COLUMNS`` when piped; ``None`` when piped without it (nothing is wrapped)."""
        return self.out.width if self.terminal or piped_columns() is not None else None

    def command(self, command: str, *, indent: str = "  ", style: str | None = None) -> None:
        """A command to paste (as :func:`~polyloop_cli.rendering.invocation.suggest` spells it), laid out
        for :attr:`columns` with line continuations."""
        for line in command_lines(command, self.columns, indent=indent):
            self.line(line, style=style)

    def json(self, value: object) -> None:
        """One JSON document on stdout (not through rich: no wrapping, no markup)."""
        sys.stdout.write(scrub(json.dumps(value, ensure_ascii=False, indent=2)) + "\n")
        sys.stdout.flush()

    def line(self, text: str | Text = "", *, style: str | None = None) -> None:
        if self.as_json:
            return
        if isinstance(text, str):
            text = Text(text, style=style or "")
        if self.terminal or self.columns is None:
            self.out.print(_scrubbed(text))
            return
        # Piped and wrapped for COLUMNS: without the space rich leaves where it wrapped.
        with self.out.capture() as captured:
            self.out.print(_scrubbed(text))
        lines = captured.get().splitlines() or [""]
        self.out.file.write("\n".join(line.rstrip() for line in lines) + "\n")
        self.out.file.flush()

    def note(self, text: str, *, style: str = "dim") -> None:
        """A diagnostic line on stderr (also in ``--json`` mode, where stdout holds the JSON)."""
        self.err.print(_scrubbed(Text(text, style=style)))

    def table(
        self,
        columns: Sequence[Column],
        rows: Sequence[Sequence[object]],
        *,
        title: str | None = None,
        header: bool = True,
    ) -> None:
        if self.as_json:
            return
        cells = [[_cell(value) for value in row] for row in rows]
        title = None if title is None else scrub(title)
        widths: list[int | None] = [None] * len(columns)
        hidden: list[str] = []
        if self.columns is not None:
            fitted = fit_widths(columns, cells, self.out.width, header=header)
            kept = [index for index, width in enumerate(fitted) if width is not None]
            hidden = [columns[index].header for index in range(len(columns)) if index not in kept]
            columns = [columns[index] for index in kept]
            cells = [[row[index] for index in kept] for row in cells]
            widths = [fitted[index] for index in kept]
        table = Table(
            title=title if self.terminal else None,
            box=box.SIMPLE_HEAD if self.terminal else None,
            show_edge=False,
            pad_edge=False,
            padding=(0, GAP - 1, 0, 0) if self.terminal else (0, GAP, 0, 0),
            header_style="bold" if self.terminal else "",
            title_justify="left",
            show_header=header,
        )
        for column, width in zip(columns, widths, strict=True):
            table.add_column(
                column.header,
                style=column.style,
                width=width,
                no_wrap=column.fit is not Fit.FOLD,
                overflow="ellipsis" if column.fit is Fit.TRUNCATE else "fold",
            )
        for row in cells:
            table.add_row(*row)
        # Only kept columns wider than the width make the table wider than it: rich must not
        # squeeze them (it would break the ids); a terminal wraps the line instead.
        needed = sum(width or 0 for width in widths) + GAP * (len(widths) - 1)
        if self.terminal:
            self._print_wide(table, needed)
        else:
            # Piped: plain columns without the padding rich adds after the last one.
            with self.out.capture() as captured:
                self._print_wide(table, needed)
            if title:
                self.out.file.write(title + "\n")
            lines = captured.get().splitlines()
            self.out.file.write("\n".join(line.rstrip() for line in lines) + "\n")
            self.out.file.flush()
        if hidden:
            narrow = "the terminal" if self.terminal else f"COLUMNS={self.out.width}"
            self.line(
                f"({', '.join(hidden)} not shown: {narrow} is too narrow; --json or a pipe "
                "without COLUMNS shows every column)",
                style="dim",
            )

    def _print_wide(self, table: Table, needed: int) -> None:
        """``table`` at the console's width, or at ``needed`` if wider (``print(width=)`` only
        narrows)."""
        width = self.out.width
        self.out.width = max(width, needed)
        try:
            self.out.print(table)
        finally:
            self.out.width = width

    def fields(self, pairs: Sequence[tuple[str, object]], *, title: str | None = None) -> None:
        """A two-column key/value block; long values fold."""
        self.table(
            (Column("field"), Column("value", Fit.FOLD)),
            [(key, value) for key, value in pairs],
            title=title,
            header=False,
        )


def fit_widths(
    columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], width: int, *, header: bool
) -> tuple[int | None, ...]:
    """Column widths (without the gaps) that fit ``width``: kept columns at their natural
    width; free-text columns share the rest, the narrow ones keeping theirs. A free-text column
    left less than :data:`MIN_FREE_TEXT` is dropped (``None``) rather than squeezed."""
    natural = [
        max(
            [_text_width(column.header) if header else 1]
            + [_text_width(row[index]) for row in rows]
        )
        for index, column in enumerate(columns)
    ]
    free = [index for index, column in enumerate(columns) if column.fit is not Fit.KEEP]
    widths: list[int | None] = list(natural)
    shown = len(columns)
    room = width - sum(natural[index] for index in range(len(columns)) if index not in free)
    pending = sorted(free, key=lambda index: natural[index])
    while pending:
        available = room - GAP * (shown - 1)
        share = available // len(pending)
        if share < MIN_FREE_TEXT:
            widths[pending.pop()] = None  # the widest free-text column goes first
            shown -= 1
            continue
        if natural[pending[0]] <= share:
            room -= natural[pending.pop(0)]
            continue
        for position, index in enumerate(pending):
            bonus = 1 if share * len(pending) + position < available else 0
            widths[index] = share + bonus
        break
    return tuple(widths)


def _text_width(value: str | Text) -> int:
    plain = value.plain if isinstance(value, Text) else value
    return max((cell_len(line) for line in plain.splitlines()), default=0)


def _cell(value: object) -> str | Text:
    if value is None:
        return ""
    if isinstance(value, Text):
        return _scrubbed(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    # Text, not str: rich reads a str as markup, which would drop "[Errno 2]" from a cell and
    # fail on "[/]" (cells hold the model's and the tools' own text).
    return Text(scrub(str(value)))


def _scrubbed(text: Text) -> Text:
    """``text`` itself, or (in the rare case it holds a secret) a scrubbed copy in its base
    style."""
    clean = scrub(text.plain)
    return text if clean == text.plain else Text(clean, style=text.style)


#: How each run status reads in a table, and its colour. One row per status.
_STATUS_STYLES = {
    "corrupt": ("CORRUPT", "bold red"),
    "unfinished": ("unfinished", "yellow"),
    "running": ("running", "cyan"),
    "waiting_approval": ("waiting_approval", "magenta"),
    "incomplete_fork": ("incomplete fork", "yellow"),
}
_GOOD_STOP_REASONS = frozenset({"task_completed", "agent_finished"})


def status_text(status: str, stop_reason: str | None, tail: str | None = None) -> Text:
    """A run's status in one cell, coloured by how it ended (colour is dropped when piped):
    the stop reason of a finished run, else the status (with the tail state, if known)."""
    if status in _STATUS_STYLES:
        label, style = _STATUS_STYLES[status]
        return Text(f"{label} ({tail})" if tail else label, style=style)
    style = "green" if stop_reason in _GOOD_STOP_REASONS else "red" if stop_reason else ""
    return Text(stop_reason or status, style=style)
