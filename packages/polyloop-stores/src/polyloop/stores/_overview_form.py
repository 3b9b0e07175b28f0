"""The stored form of a run overview (design 0070): one JSON object, NUL-free text."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from polyloop.errors import CorruptLogError
from polyloop.listing import RunOverview, overview_of
from polyloop.ports import RunLog

__all__ = ["overview_from_json", "overview_json", "read_overview"]


def read_overview(run_id: str, read: Callable[[str], RunLog]) -> RunOverview:
    """The overview of ``run_id`` from its log as ``read`` (the store's ``read_log`` on its
    own thread) returns it: ``corrupt`` when it refuses the log, as ``polyloop runs`` says."""
    try:
        log = read(run_id)
    except CorruptLogError as error:
        return overview_of(run_id, RunLog(), " ".join(str(error).split()))
    return overview_of(run_id, log)


def overview_json(overview: RunOverview) -> str:
    """``overview`` as JSON text (``json.dumps`` escapes NUL, which a PostgreSQL ``text``
    column cannot hold)."""
    return json.dumps(
        {field.name: getattr(overview, field.name) for field in dataclasses.fields(overview)}
    )


def overview_from_json(text: str) -> RunOverview:
    """The overview :func:`overview_json` stored."""
    data = json.loads(text)
    data["tools"] = tuple(data["tools"])
    data["binding"] = tuple((key, value) for key, value in data["binding"])
    return RunOverview(**data)
