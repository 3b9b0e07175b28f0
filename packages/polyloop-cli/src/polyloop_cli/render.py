"""Terminal output: rich tables and colour on a TTY, plain columns when piped, or JSON.

Colour and box drawing appear only when the stream is a terminal (and ``NO_COLOR`` is unset);
piped output has no escape codes and no line wrapping, so ``grep`` and ``awk`` work on it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["Output"]

#: Width used when the stream is not a terminal: wide enough that no row wraps.
PIPED_WIDTH = 100_000


def _console(stream: TextIO) -> Console:
    terminal = stream.isatty()
    return Console(
        file=stream,
        highlight=False,
        soft_wrap=not terminal,
        width=None if terminal else PIPED_WIDTH,
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

    def json(self, value: object) -> None:
        """One JSON document on stdout (not through rich: no wrapping, no markup)."""
        sys.stdout.write(json.dumps(value, ensure_ascii=False, indent=2) + "\n")
        sys.stdout.flush()

    def line(self, text: str | Text = "", *, style: str | None = None) -> None:
        if self.as_json:
            return
        if isinstance(text, str):
            text = Text(text, style=style or "")
        self.out.print(text)

    def note(self, text: str, *, style: str = "dim") -> None:
        """A diagnostic line on stderr (also in ``--json`` mode, where stdout holds the JSON)."""
        self.err.print(Text(text, style=style))

    def table(
        self,
        columns: Sequence[str],
        rows: Sequence[Sequence[object]],
        *,
        title: str | None = None,
        styles: Mapping[str, str] | None = None,
        header: bool = True,
    ) -> None:
        if self.as_json:
            return
        table = Table(
            title=title if self.terminal else None,
            box=box.SIMPLE_HEAD if self.terminal else None,
            show_edge=False,
            pad_edge=False,
            header_style="bold" if self.terminal else "",
            title_justify="left",
            show_header=header,
        )
        for column in columns:
            table.add_column(column, style=(styles or {}).get(column, ""), overflow="fold")
        for row in rows:
            table.add_row(*(_cell(value) for value in row))
        if self.terminal:
            self.out.print(table)
            return
        # Piped: plain columns without the padding rich adds after the last one.
        with self.out.capture() as captured:
            self.out.print(table)
        if title:
            self.out.file.write(title + "\n")
        self.out.file.write("\n".join(line.rstrip() for line in captured.get().splitlines()) + "\n")
        self.out.file.flush()

    def fields(self, pairs: Sequence[tuple[str, object]], *, title: str | None = None) -> None:
        """A two-column key/value block."""
        self.table(
            ("field", "value"), [(key, value) for key, value in pairs], title=title, header=False
        )


def _cell(value: object) -> str | Text:
    if value is None:
        return ""
    if isinstance(value, Text):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def status_text(status: str, stop_reason: str | None) -> Text:
    """A run's status, coloured by how it ended (colour is dropped when piped)."""
    if status == "corrupt":
        return Text("CORRUPT", style="bold red")
    if status == "unfinished":
        return Text("unfinished", style="yellow")
    if status == "running":
        return Text("running", style="cyan")
    good = {"task_completed", "agent_finished"}
    style = "green" if stop_reason in good else "red" if stop_reason else ""
    return Text(stop_reason or status, style=style)
