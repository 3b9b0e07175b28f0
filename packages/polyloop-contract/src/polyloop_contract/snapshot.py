"""Snapshot-test trajectories with syrupy, in the library's own JSON.

Use it as a pytest plugin module (``pytest_plugins = ["polyloop_contract.snapshot"]`` in a test
module or the root ``conftest.py``); it works with or without ``--polyloop-contract``. It gives:

- ``trajectory_snapshot``: syrupy's ``snapshot`` using :class:`TrajectorySnapshotExtension`.
  ``assert result == trajectory_snapshot`` pins a ``RunResult`` (or a ``StepRecord``, a
  ``RunLog``, one log record) as one ``.json`` file under ``__snapshots__/<test module>/``,
  holding exactly :func:`~polyloop_contract.trajectory_json.trajectory_json`'s text. A mismatch
  lists the differing fields by step (``step 1 · observation: ...``) above syrupy's line diff.
  Mask fields with syrupy's filters: ``trajectory_snapshot(exclude=props("call_id"))`` (or
  ``paths("steps.0.observation")``) keeps each field with the value ``"<masked>"``; a scalar a
  ``matcher=`` replaces shows as masked as well.
- ``trajectory_clock``: a fresh :class:`~polyloop_contract.clock.TickingClock` (1 ms per call)
  to pass as ``clock=`` to ``run``/``resume``, so every step records ``step_wall_ms == 1``.

Without pytest, use :class:`TickingClock` and :func:`trajectory_json` directly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest
from syrupy.assertion import SnapshotAssertion
from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode

from polyloop_contract.clock import TickingClock
from polyloop_contract.trajectory_diff import trajectory_differences
from polyloop_contract.trajectory_json import (
    MASKED,
    MaskRule,
    _lay_out,
    compact_json,
    run_log_from_json,
    trajectory_json,
)

if TYPE_CHECKING:
    from syrupy.types import PropertyFilter, PropertyMatcher, SerializableData, SerializedData

__all__ = [
    "MASKED",
    "TickingClock",
    "TrajectorySnapshotExtension",
    "run_log_from_json",
    "trajectory_clock",
    "trajectory_json",
    "trajectory_snapshot",
]


class TrajectorySnapshotExtension(SingleFileSnapshotExtension):
    """A syrupy extension writing each snapshot as the library's pretty-printed JSON (``.json``).

    ``exclude=`` filters mask fields (the key stays, the value reads ``"<masked>"``) instead of
    dropping them, and a scalar that a ``matcher=`` (``path_type``, ``path_value``) replaces shows
    as masked too; ``include=`` is refused, because the library's JSON has every field.
    """

    _write_mode = WriteMode.TEXT
    file_extension = "json"
    _file_extension = "json"  # the same setting under its syrupy 4 name

    def serialize(
        self,
        data: SerializableData,
        *,
        exclude: PropertyFilter | None = None,
        include: PropertyFilter | None = None,
        matcher: PropertyMatcher | None = None,
    ) -> SerializedData:
        if include is not None:
            raise TypeError(
                "TrajectorySnapshotExtension writes every field of the library's JSON, so it "
                "takes no include=; mask fields with exclude=props(...) or paths(...) instead."
            )
        mask: MaskRule = (lambda name, path: False) if exclude is None else _mask_rule(exclude)
        replaces = None if matcher is None else _value_rule(matcher)
        return _lay_out(compact_json(data), mask, replaces)

    def diff_lines(
        self, serialized_data: SerializedData, snapshot_data: SerializedData
    ) -> Iterator[str]:
        differences = trajectory_differences(str(snapshot_data), str(serialized_data))
        if differences:
            yield "Trajectory fields that differ (snapshot → this run):"
            for line in differences:
                yield "  " + line
        yield from super().diff_lines(serialized_data, snapshot_data)


def _mask_rule(exclude: PropertyFilter) -> MaskRule:
    """A syrupy property filter as a mask rule (paths as syrupy builds them: name and type)."""

    def rule(name: str, path: tuple[str | int, ...]) -> bool:
        return bool(exclude(prop=name, path=_syrupy_path(path)))

    return rule


def _value_rule(matcher: PropertyMatcher) -> Callable[[object, tuple[str | int, ...]], bool]:
    """A syrupy matcher as a value rule: a scalar it replaces shows as masked."""

    def replaces(value: object, path: tuple[str | int, ...]) -> bool:
        return matcher(data=value, path=_syrupy_path(path)) is not value

    return replaces


def _syrupy_path(path: tuple[str | int, ...]) -> tuple[tuple[Any, Any], ...]:
    """Keys and indices as syrupy's filters and matchers read a path: (name, type) pairs."""
    return tuple((part, object) for part in path)


@pytest.fixture
def trajectory_snapshot(snapshot: SnapshotAssertion) -> SnapshotAssertion:
    """syrupy's ``snapshot``, writing trajectories in the library's JSON."""
    return snapshot.use_extension(TrajectorySnapshotExtension)


@pytest.fixture
def trajectory_clock() -> TickingClock:
    """A fresh clock that advances 1 ms per call: every step records ``step_wall_ms == 1``."""
    return TickingClock()
