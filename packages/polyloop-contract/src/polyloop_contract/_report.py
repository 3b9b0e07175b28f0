"""What the end-of-run report says: capabilities declared off, fixtures not provided."""

from __future__ import annotations

import pytest

_NOTES = pytest.StashKey[dict[str, None]]()


def install(config: pytest.Config) -> None:
    config.stash[_NOTES] = {}


def note(config: pytest.Config, line: str) -> None:
    """Remember one line for the report (each distinct line is printed once)."""
    config.stash.setdefault(_NOTES, {})[line] = None


def lines(config: pytest.Config) -> list[str]:
    notes: dict[str, None] = config.stash.get(_NOTES, {})
    return list(notes)
