"""The one base class of every error PolyLoop raises, and its direct families.

Every message says what happened, to which run or record, and what to do next.
"""

from __future__ import annotations

__all__ = [
    "ConfigurationError",
    "CorruptLogError",
    "EnvironmentFailure",
    "PolyLoopError",
    "RunAlreadyStartedError",
    "RunNotFoundError",
    "SchemaVersionError",
    "SerializationError",
    "SnapshotMismatchError",
    "StoreError",
    "ToolCallRejected",
]


class PolyLoopError(Exception):
    """Base class of every error raised by PolyLoop and its stores and adapters."""


class ConfigurationError(PolyLoopError, ValueError):
    """A definition, request, budget or registry was built from values that cannot work."""


class EnvironmentFailure(PolyLoopError):
    """Raised by a tool handler or executor when the environment itself can no longer serve.

    A tool handler that raises anything else has executed (its error is an observation the
    model can correct); raising this one makes the step an ``ENV_ERROR`` and stops the run.
    """


class ToolCallRejected(PolyLoopError, ValueError):
    """A tool call names an unknown tool or its arguments fail the tool's JSON Schema."""


class SerializationError(PolyLoopError, ValueError):
    """A payload cannot be decoded into the record it claims to be."""


class SchemaVersionError(SerializationError):
    """A payload has no ``schema_version`` or one this library cannot read."""


class StoreError(PolyLoopError):
    """A RunStore could not do what was asked; the message says whether data is at risk."""


class RunAlreadyStartedError(StoreError):
    """A second ``RunStarted`` (or ``RunFinished``) was written for one run_id."""


class RunNotFoundError(PolyLoopError, LookupError):
    """``resume`` was asked to continue a run whose log has no ``RunStarted``."""


class CorruptLogError(PolyLoopError):
    """A run log breaks a structural rule; resume refuses to continue from it."""


class SnapshotMismatchError(PolyLoopError):
    """The parameters a run started with differ from the ones it is resumed with."""
