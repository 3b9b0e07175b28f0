"""Whether a store kept in local files may serve the workers of a cluster (no Ray needed)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

__all__ = ["local_store_refusal"]


def local_store_refusal(
    store_path: Path, hosts: Iterable[str], here: str, shared_disk: bool
) -> str | None:
    """Why a sqlite/jsonl store at ``store_path`` cannot serve workers on ``hosts``, or ``None``.

    Its runs and their leases are files and POSIX locks on one disk: workers on this host share
    both; workers elsewhere see another disk (or none), and their locks would not exclude this
    host's. Only ``shared_disk`` — the user's word that every node mounts this disk at the same
    path with working POSIX locks — lets other hosts in; each worker still has to read back a
    file written beside the store before the batch starts.
    """
    others = sorted({host for host in hosts if host != here})
    if not others or shared_disk:
        return None
    named = ", ".join(others[:3]) + (" and more" if len(others) > 3 else "")
    return (
        f"the store {store_path} is local files, but Ray nodes run on other hosts ({named}) "
        "whose file locks cannot exclude this host's; use a postgresql:// store, or "
        "--shared-disk if all nodes share this disk."
    )
