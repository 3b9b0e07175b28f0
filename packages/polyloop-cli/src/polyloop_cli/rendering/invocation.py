"""The commands the CLI suggests, spelled so that they work when pasted into the user's shell.

``polyloop`` is often not on the user's ``PATH``: ``scripts/demo.sh`` runs it through a private
uv, and ``uv run`` puts the virtual environment on ``PATH`` for its child only. So a suggested
command starts with however *this* process was started, as a path the user's shell can run from
the current directory (``.venv/bin/polyloop``), and only with the bare name when the ``PATH``
lookup finds this very program and it lives outside the current directory.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from rich.cells import cell_len

__all__ = ["CONTINUED", "command_lines", "command_prefix", "suggest"]


def _shown_path(path: Path) -> str:
    """``path`` relative to the current directory when it lies below it, else absolute."""
    absolute = path.absolute()
    try:
        text = str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)
    return text if os.sep in text else f".{os.sep}{text}"


def command_prefix() -> str:
    """The words that start this program again, quoted for a POSIX shell."""
    script = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    if script.name == "__main__.py":
        return f"{shlex.quote(_shown_path(Path(sys.executable)))} -m polyloop_cli"
    if not script.is_file():
        return "polyloop"
    if _on_users_path(script) and _shown_path(script).startswith(os.sep):
        return shlex.quote(script.name)
    return shlex.quote(_shown_path(script))


def _on_users_path(script: Path) -> bool:
    """Whether the bare name finds ``script`` in the user's own shell too.

    ``uv run`` (like an activated virtual environment) puts ``$VIRTUAL_ENV/bin`` on ``PATH``
    for its child only, so a program found there is named by its path."""
    found = shutil.which(script.name)
    if found is None:
        return False
    try:
        if not Path(found).samefile(script):
            return False
    except OSError:
        return False
    venv = os.environ.get("VIRTUAL_ENV")
    return not venv or Path(venv, "bin") != script.absolute().parent


def suggest(*words: object) -> str:
    """A complete command line: this program followed by ``words``, each quoted as needed."""
    return " ".join([command_prefix(), *(shlex.quote(str(word)) for word in words)])


#: How much a continued command line is indented more than its first line.
CONTINUED = "    "


def command_lines(command: str, width: int | None, *, indent: str = "") -> list[str]:
    """``command`` (as :func:`suggest` spells it) as lines of at most ``width`` columns that
    paste as one command: each but the last ends in `` \\`` (a line continuation), the next is
    indented by :data:`CONTINUED` more, and an option stays on the line of its value. ``None``
    (a pipe without ``COLUMNS``): one line.

    A word wider than a line is cut into quoted pieces, each but the last ending in ``\\`` and
    the next starting the line (an indent there would split the word)."""
    if width is None or cell_len(indent + command) <= width:
        return [indent + command]
    words = [shlex.quote(word) for word in shlex.split(command)]
    units: list[list[str]] = []
    while words:
        unit = [words.pop(0)]
        if unit[0].startswith("-") and words and not words[0].startswith("-"):
            unit.append(words.pop(0))
        units.append(unit)
    lines: list[str] = []
    current = ""

    def fits(line: str) -> bool:
        return cell_len(line) + 2 <= width  # room for " \\"

    def flush() -> None:
        nonlocal current
        if current:
            lines.append(current + " \\")
            current = ""

    for unit in units:
        start = indent if not lines and not current else indent + CONTINUED
        joined = " ".join(unit)
        if fits(f"{current} {joined}" if current else start + joined):
            current = f"{current} {joined}" if current else start + joined
            continue
        flush()
        if fits(start + joined):
            current = start + joined
            continue
        for word in unit:
            if current and fits(f"{current} {word}"):
                current = f"{current} {word}"
            elif fits(start + word):
                flush()
                current = start + word
            else:
                flush()
                *cut, current = _cut_word(word, width)
                lines.extend(cut)
    lines.append(current)
    return lines


def _cut_word(word: str, width: int) -> list[str]:
    """The shell word ``word`` as pieces of at most ``width`` columns with room for `` \\``,
    each quoted, all but the last ending in ``\\``: pasted, they join into ``word`` again."""
    (value,) = shlex.split(word)
    pieces: list[str] = []
    piece = ""
    for character in value:
        if piece and cell_len(shlex.quote(piece + character)) + 2 > width:
            pieces.append(shlex.quote(piece) + "\\")
            piece = ""
        piece += character
    pieces.append(shlex.quote(piece))
    return pieces
