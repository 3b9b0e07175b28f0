"""File names for run logs: derived from the run_id, safe for any run_id on any disk.

A name is ``<prefix>.<sha256>.jsonl`` where ``<sha256>`` is the lowercase hex SHA-256 of the
UTF-8 bytes of the run_id and ``<prefix>`` is a short readable hint made only of
``[a-z0-9_-]`` (``run`` when nothing readable is left). Consequences a reader relies on:

- no run_id can escape the directory: the name never holds a separator, ``..``, NUL or a
  leading dot, whatever the run_id is (``../x``, ``/etc/passwd``, 10 kB, non-ASCII);
- two different run_ids never share a name, and their names differ in the hash part, which
  is lowercase: on a case-insensitive disk ``Run`` and ``run`` still get different files;
- the prefix is a convenience for humans only: the file's records carry the real run_id,
  which the store checks on every read.

A run_id that cannot be encoded as UTF-8 (a lone surrogate) cannot be stored as JSON text
either; it is refused with a :class:`~polyloop.errors.StoreError`.
"""

from __future__ import annotations

import hashlib
import re

from polyloop.stores._durable import unstorable_run_id, utf8_of

__all__ = ["LEASE_SUFFIX", "SUFFIX", "file_name_for", "is_run_file_name", "lease_name_for"]

SUFFIX = ".jsonl"
LEASE_SUFFIX = ".lease"
_PREFIX_CHARS = 32
_UNREADABLE = re.compile(r"[^a-z0-9_-]+")
_RUN_FILE = re.compile(rf"[a-z0-9_-]{{0,{_PREFIX_CHARS}}}\.[0-9a-f]{{64}}{re.escape(SUFFIX)}")


def file_name_for(run_id: str) -> str:
    """The file name (no directory) holding the log of ``run_id``."""
    encoded = utf8_of(run_id)
    if encoded is None:
        raise unstorable_run_id(repr(run_id))
    return _name(run_id, encoded, SUFFIX)


def is_run_file_name(name: str) -> bool:
    """Whether ``name`` has the form :func:`file_name_for` gives a run's file."""
    return _RUN_FILE.fullmatch(name) is not None


def lease_name_for(run_id: str) -> str:
    """The name of the lease file of ``run_id``: like :func:`file_name_for`, ending ``.lease``.

    Total: a run_id that cannot be stored still gets a lease name (its surrogates are hashed
    as they are), so taking its lease works and ``resume`` reports the run as not found.
    """
    return _name(run_id, run_id.encode("utf-8", "surrogatepass"), LEASE_SUFFIX)


def _name(run_id: str, encoded: bytes, suffix: str) -> str:
    digest = hashlib.sha256(encoded).hexdigest()
    prefix = _UNREADABLE.sub("_", run_id[: _PREFIX_CHARS * 2].lower()).strip("_")[:_PREFIX_CHARS]
    return f"{prefix or 'run'}.{digest}{suffix}"
