"""Differences between two trajectory snapshots, one line per field, named by step and field.

A line reads ``step 1 · observation: 'shipped' → 'lost'`` (snapshot value first). Objects
carrying a ``step_idx`` are named ``step N`` and tagged log records ``record N (kind)``, so the
field path after them stays short: ``record 7 (step_completed) · action_outcome.observation``.
Lists are compared position by position.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

__all__ = ["trajectory_differences"]

_SHOWN_CHARACTERS = 60


def trajectory_differences(expected: str, actual: str, *, limit: int = 12) -> list[str]:
    """One line per field that differs between two snapshot texts (at most ``limit``, then a count).

    Empty when the texts hold equal JSON, or when either is not JSON (then only a text diff can
    say what changed).
    """
    try:
        before, after = json.loads(expected), json.loads(actual)
    except ValueError:
        return []
    lines = list(_compare(before, after, _Place.root(before, after)))
    if len(lines) > limit:
        lines[limit:] = [f"… and {len(lines) - limit} more"]
    return lines


class _Place:
    """Where a value sits: named parts (``record 7 (step_completed)``, ``step 1``) then fields."""

    __slots__ = ("fields", "names")

    def __init__(self, names: tuple[str, ...], fields: tuple[str | int, ...]) -> None:
        self.names = names
        self.fields = fields

    @classmethod
    def root(cls, before: Any, after: Any) -> _Place:
        return cls((), ()).enter(None, before, after)

    def enter(self, step: str | int | None, before: Any, after: Any) -> _Place:
        """The place of the child reached by key or index ``step`` (``None``: this value itself)."""
        node = before if isinstance(before, dict) else after
        if isinstance(node, dict):
            index = node.get("step_idx")
            if isinstance(index, int) and not isinstance(index, bool):
                return _Place((*self.names, f"step {index}"), ())
            if isinstance(step, int) and not self.names and not self.fields and _tagged(node):
                return _Place((f"record {step} ({node['type']})",), ())
        if step is None:
            return self
        return _Place(self.names, (*self.fields, step))

    def text(self) -> str:
        parts = list(self.names)
        path = "".join(_field_text(field) for field in self.fields).lstrip(".")
        if path or not parts:
            parts.append(path or "(the whole snapshot)")
        return " · ".join(parts)


def _tagged(node: dict[str, Any]) -> bool:
    return node.keys() == {"type", "record"} and isinstance(node["type"], str)


def _field_text(field: str | int) -> str:
    if isinstance(field, int):
        return f"[{field}]"
    return f".{field}" if field.isidentifier() else f"[{json.dumps(field, ensure_ascii=False)}]"


def _compare(before: Any, after: Any, place: _Place) -> Iterator[str]:
    if isinstance(before, dict) and isinstance(after, dict):
        if _tagged(before) and _tagged(after) and place.names and not place.fields:
            if before["type"] != after["type"]:
                yield f"{place.text()}: a {before['type']} record → a {after['type']} record"
                return
            yield from _compare(before["record"], after["record"], place)
            return
        for key in [*before, *(key for key in after if key not in before)]:
            if key not in after:
                yield f"{place.enter(key, before[key], None).text()}: only in the snapshot"
            elif key not in before:
                yield f"{place.enter(key, None, after[key]).text()}: only in this run"
            else:
                yield from _compare(
                    before[key], after[key], place.enter(key, before[key], after[key])
                )
        return
    if isinstance(before, list) and isinstance(after, list):
        for index in range(max(len(before), len(after))):
            if index >= len(after):
                yield f"{place.enter(index, before[index], None).text()}: only in the snapshot"
            elif index >= len(before):
                yield f"{place.enter(index, None, after[index]).text()}: only in this run"
            else:
                child = place.enter(index, before[index], after[index])
                yield from _compare(before[index], after[index], child)
        return
    if before != after or type(before) is not type(after):
        first, second = _shown(before, after)
        yield f"{place.text()}: {first} → {second}"


def _shown(before: Any, after: Any) -> tuple[str, str]:
    """Both values as short text; two long strings are shown from just before they differ."""
    if isinstance(before, str) and isinstance(after, str):
        common = next(
            (i for i, (a, b) in enumerate(zip(before, after, strict=False)) if a != b),
            min(len(before), len(after)),
        )
        start = max(0, common - 10) if common > 20 else 0
        return _shorten(before, start), _shorten(after, start)
    return _scalar(before), _scalar(after)


def _shorten(text: str, start: int) -> str:
    piece = text[start : start + _SHOWN_CHARACTERS]
    # repr escapes what a terminal should not receive raw (lone surrogates, line separators).
    shown = repr(piece)
    return ("…" if start else "") + shown + ("…" if start + _SHOWN_CHARACTERS < len(text) else "")


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return _shorten(value, 0)
    text = json.dumps(value, ensure_ascii=True)
    return text if len(text) <= _SHOWN_CHARACTERS else text[:_SHOWN_CHARACTERS] + "…"
