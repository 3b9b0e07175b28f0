"""The one base class of every error PolyLoop raises, and its direct families.

Every message says what happened, to which run or record, and what to do next.
"""

from __future__ import annotations

from polyloop._lease import LeaseHolder

__all__ = [
    "AskNotPendingError",
    "ConfigurationError",
    "CorruptLogError",
    "DuplicateRecordError",
    "EnvironmentFailure",
    "LeaseLostError",
    "PolyLoopError",
    "RunAlreadyStartedError",
    "RunLeaseHeldError",
    "RunNotFinishedError",
    "RunNotFoundError",
    "RunWouldParkError",
    "SchemaVersionError",
    "SerializationError",
    "SnapshotMismatchError",
    "StaleAskError",
    "StoreError",
    "ToolCallRejected",
    "UnsupportedStoreError",
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


class DuplicateRecordError(StoreError):
    """A record that a run log holds at most once was written a second time, and refused.

    The loop never writes one (a replay does not write its intent again): a store refuses the
    second intent of a (run_id, kind, result_id), the second result of a result_id and the
    second ``StepCompleted`` of a step index, rather than keeping, merging or dropping it.
    """


class RunAlreadyStartedError(DuplicateRecordError):
    """A second ``RunStarted`` (or ``RunFinished``) was written for one run_id."""


class LeaseLostError(StoreError):
    """A store refused a write because the run's lease it was holding is gone.

    Raised by stores whose lease can be lost while the process lives (a server session that
    died): the write is not stored, and the store never reacquires the lease on its own.
    """


class RunLeaseHeldError(PolyLoopError):
    """``run``/``resume`` was refused because another driver holds the run's lease right now.

    Raised before anything is read or written and before any seam is called. ``holder`` says
    who holds it, where the store can tell.
    """

    def __init__(self, message: str, *, run_id: str, holder: LeaseHolder | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.holder = holder

    @classmethod
    def held_by(
        cls, run_id: str, holder: LeaseHolder | None, *, where: str | None = None
    ) -> RunLeaseHeldError:
        """The standard refusal: names the run, the holder as far as known, and what to do.

        ``where`` names the lease's storage (a file, a database) when that helps a reader.
        """
        who = (holder or LeaseHolder()).describe()
        place = f" Lease: {where}" if where else ""
        return cls(
            f"Run {run_id!r} is being driven right now by {who}; nothing was read or written. "
            f"Wait for that driver to finish, or pass lease_wait_seconds to run/resume.{place}",
            run_id=run_id,
            holder=holder,
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields survive pickling (a batch worker may send the error home).
        return (_rebuild_lease_held, (self.args[0], self.run_id, self.holder))


def _rebuild_lease_held(message: str, run_id: str, holder: LeaseHolder | None) -> RunLeaseHeldError:
    return RunLeaseHeldError(message, run_id=run_id, holder=holder)


class RunNotFoundError(PolyLoopError, LookupError):
    """``resume`` was asked to continue a run whose log has no ``RunStarted``."""


class CorruptLogError(PolyLoopError):
    """A run log breaks a structural rule; resume refuses to continue from it."""


class SnapshotMismatchError(PolyLoopError):
    """The parameters a run started with differ from the ones it is resumed with."""


class RunNotFinishedError(PolyLoopError):
    """``follow_up`` was asked to continue from a run that has not finished (design 0052)."""


class RunWouldParkError(ConfigurationError):
    """``run``/``resume`` was given a gated request: one that may have to wait for a person.

    Raised at once, before the lease is taken or anything is read or written. Such a run is
    driven through ``run_or_park``/``resume_or_park``, whose return value says whether it
    finished or parked (design 0037).
    """


class UnsupportedStoreError(ConfigurationError):
    """The store lacks an optional capability the request needs (e.g. ``UserAsking`` for a
    gated run); raised before anything is written."""


class AskNotPendingError(PolyLoopError):
    """A decision was given for a run that waits on no ask: none was made, it is already
    decided, or the run is finished. The message says which."""


class StaleAskError(PolyLoopError):
    """A decision was bound to another ask than the pending one: it names the ask of another
    step (design 0059), or the arguments, the tool's schema or description, or the approval
    policy differ from what was asked.

    ``key`` names what differs (``"step"``, ``"arguments_sha256"``, ``"schema_sha256"``,
    ``"description_sha256"``, ``"policy_name"``); the message names both asks when the step
    differs; nothing was written.
    """

    def __init__(self, message: str, *, key: str) -> None:
        super().__init__(message)
        self.key = key

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_stale, (self.args[0], self.key))


def _rebuild_stale(message: str, key: str) -> StaleAskError:
    return StaleAskError(message, key=key)
