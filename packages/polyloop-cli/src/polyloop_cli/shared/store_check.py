"""Is the path a store URL names really a store of that kind? If not, say exactly what is there.

Recognised by content, read-only (the stores themselves write no marker), with the stores'
own layout readers (:mod:`polyloop.stores.salvage`):

- a SQLite store is a file that starts with SQLite's header and holds the store's records table;
- a JSON Lines store is a directory that is empty or holds at least one run file, named the way
  the store names them: ``<readable prefix>.<64 hex digits: sha256 of the run_id>.jsonl``.

Anything else that exists at the path is "not a store" (``STORE_UNREADABLE``), with a message
naming what was found and, where it can tell, the URL that was probably meant.
"""

from __future__ import annotations

import os
from pathlib import Path

from polyloop.stores.salvage import (
    RECORDS_TABLE,
    has_records_table,
    is_run_file_name,
    starts_like_sqlite,
)
from polyloop_cli.shared.errors import CliError, ExitCode

__all__ = ["check_store_path"]

#: How many names of foreign entries a message lists.
_NAMED = 3


def _not_a_store(message: str) -> CliError:
    return CliError(ExitCode.STORE_UNREADABLE, message)


def check_store_path(kind: str, path: Path, *, create: bool, missing_advice: str) -> None:
    """Raise a :class:`CliError` unless ``path`` holds a store of ``kind`` (or, with ``create``,
    nothing yet). A missing path is ``STORE_NOT_FOUND`` (unless ``create``), its message ending
    in ``missing_advice``."""
    if not path.exists():
        if create:
            return
        what = "SQLite store (file)" if kind == "sqlite" else "JSON Lines store (directory)"
        why = (
            "no such file or directory"
            if path.parent.is_dir()
            else f"the directory {path.parent} does not exist"
        )
        raise CliError(ExitCode.STORE_NOT_FOUND, f"no {what} at {path} ({why}); {missing_advice}")
    if kind == "sqlite":
        _check_sqlite(path)
    else:
        _check_jsonl(path, create=create)


def _check_sqlite(path: Path) -> None:
    if path.is_dir():
        hint = _directory_hint(path)
        raise _not_a_store(
            f"{path} is a directory, not a SQLite store (a SQLite store is one file); {hint}."
        )
    if not path.is_file():
        raise _not_a_store(f"{path} is not a regular file, so not a SQLite store.")
    if path.stat().st_size == 0:
        raise _not_a_store(
            f"{path} is an empty file, not a SQLite store; the demo creates one "
            "(pass a path that does not exist yet), or pass an existing store."
        )
    if not starts_like_sqlite(path):
        hint = (
            f"it looks like a JSON Lines run file: the JSON Lines store is the directory "
            f"holding it, --store jsonl://{path.parent.absolute()}"
            if is_run_file_name(path.name)
            else "pass the file of a store written by PolyLoop"
        )
        raise _not_a_store(f"{path} is not a SQLite database (no SQLite header); {hint}.")
    if not has_records_table(path):
        raise _not_a_store(
            f"{path} is a SQLite database but not a PolyLoop store (it has no {RECORDS_TABLE} "
            "table); pass the file of a store written by PolyLoop."
        )


def _check_jsonl(path: Path, *, create: bool) -> None:
    if not path.is_dir():
        hint = (
            f"it is a SQLite database: use --store sqlite://{path.absolute()}"
            if starts_like_sqlite(path)
            else "pass the directory that holds the run files"
        )
        raise _not_a_store(
            f"{path} is a file, not a JSON Lines store (a JSON Lines store is a directory); {hint}."
        )
    try:
        names = sorted(os.listdir(path))
    except OSError as error:
        raise _not_a_store(
            f"cannot list the directory {path} ({error.strerror}); check that you may read it."
        ) from None
    if not names or any(is_run_file_name(name) for name in names):
        return
    shown = ", ".join(names[:_NAMED]) + (", …" if len(names) > _NAMED else "")
    advice = _directory_hint(path)
    if create:
        advice = "choose an empty or new directory for the demo's store"
    raise _not_a_store(
        f"{path} is not a JSON Lines store: it holds no run files (named "
        f"<prefix>.<sha256>.jsonl) but {len(names)} other entr"
        f"{'y' if len(names) == 1 else 'ies'} ({shown}); {advice}."
    )


def _directory_hint(path: Path) -> str:
    """What to pass instead of a directory that is not the store asked for."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        names = []
    databases = [
        name for name in names if (path / name).is_file() and starts_like_sqlite(path / name)
    ]
    if databases:
        return f"it holds a SQLite file: pass --store sqlite://{(path / databases[0]).absolute()}"
    if any(is_run_file_name(name) for name in names):
        return f"it holds JSON Lines run files: pass --store jsonl://{path.absolute()}"
    return "pass the path of a store written by PolyLoop"
