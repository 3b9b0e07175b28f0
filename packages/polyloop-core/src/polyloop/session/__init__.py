"""Assembly and the governed loop: ``AgentDefinition``, ``RunRequest``, ``run`` and ``resume``."""

from __future__ import annotations

from polyloop.session._definition import (
    OBSERVATION_TOKEN,
    TOOLS_TOKEN,
    AgentDefinition,
    RunRequest,
    merge_snapshots,
)
from polyloop.session._loop import resume, run

__all__ = [
    "OBSERVATION_TOKEN",
    "TOOLS_TOKEN",
    "AgentDefinition",
    "RunRequest",
    "merge_snapshots",
    "resume",
    "run",
]
