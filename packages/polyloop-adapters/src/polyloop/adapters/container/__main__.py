"""``python -m polyloop.adapters.container build-image [TAG]``: build the local Docker image."""

from __future__ import annotations

import asyncio
import sys

from polyloop.adapters.container._backends import DEFAULT_DOCKER_IMAGE
from polyloop.adapters.container._errors import ContainerError
from polyloop.adapters.container._image import ensure_docker_image


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "build-image" or len(argv) > 2:
        print("usage: python -m polyloop.adapters.container build-image [TAG]", file=sys.stderr)
        return 2
    tag = argv[1] if len(argv) == 2 else DEFAULT_DOCKER_IMAGE
    try:
        image_id = asyncio.run(ensure_docker_image(tag))
    except ContainerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{tag} {image_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
