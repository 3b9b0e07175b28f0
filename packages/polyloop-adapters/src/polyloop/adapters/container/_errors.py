"""The errors of the container executor; each says what to do next."""

from __future__ import annotations

from polyloop.errors import PolyLoopError

__all__ = [
    "BackendUnavailableError",
    "ContainerError",
    "ImageBuildError",
    "SessionDeadError",
]


class ContainerError(PolyLoopError):
    """Base class of the container executor's errors."""


class BackendUnavailableError(ContainerError):
    """The sandbox backend cannot start on this machine; the message names what is missing."""


class SessionDeadError(ContainerError):
    """The session's interpreter is gone (killed, crashed or unreachable); its state is lost.

    The run cannot go on in this session: the next step would see none of the variables the
    earlier steps defined. Stop the run, or start a new session with ``restart()`` (which
    changes ``session_id``, so ``resume`` refuses to continue the old run on it).
    """


class ImageBuildError(ContainerError):
    """The local Python image or root file system could not be built."""
