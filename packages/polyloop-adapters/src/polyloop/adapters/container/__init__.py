"""A dissect-style ``ActionExecutor``: each action's Python code runs in one long-lived,
stateful, isolated interpreter session.

Two sandbox backends sit behind one internal seam:

* :class:`BubblewrapBackend`: Linux namespaces through ``bwrap``; no daemon needed.
* :class:`DockerBackend`: a container of a running Docker Engine; the image is a parameter
  (build the default one from this machine's Python with :func:`ensure_docker_image`).

Example::

    async with ContainerExecutor(BubblewrapBackend(), time_limit_seconds=10) as executor:
        outcome = await executor.execute(Action(text="x = 2 + 2\\nprint(x)", tool_call=None))
"""

from polyloop.adapters.container._backends import (
    DEFAULT_DOCKER_IMAGE,
    BubblewrapBackend,
    DockerBackend,
    LaunchSpec,
    Limits,
    Sandbox,
    SandboxBackend,
    remove_orphan_containers,
)
from polyloop.adapters.container._errors import (
    BackendUnavailableError,
    ContainerError,
    ImageBuildError,
    SessionDeadError,
)
from polyloop.adapters.container._executor import ContainerExecutor
from polyloop.adapters.container._image import build_rootfs, ensure_docker_image
from polyloop.adapters.container._parser import FirstCodeBlockParser

__all__ = [
    "DEFAULT_DOCKER_IMAGE",
    "BackendUnavailableError",
    "BubblewrapBackend",
    "ContainerError",
    "ContainerExecutor",
    "DockerBackend",
    "FirstCodeBlockParser",
    "ImageBuildError",
    "LaunchSpec",
    "Limits",
    "Sandbox",
    "SandboxBackend",
    "SessionDeadError",
    "build_rootfs",
    "ensure_docker_image",
    "remove_orphan_containers",
]
