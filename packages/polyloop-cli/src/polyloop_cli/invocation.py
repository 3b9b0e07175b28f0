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

__all__ = ["command_prefix", "suggest"]


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
