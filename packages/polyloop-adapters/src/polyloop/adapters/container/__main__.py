"""``python -m polyloop.adapters.container build-image [TAG]``: build the local Docker image."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from polyloop.adapters.container._backends import DEFAULT_DOCKER_IMAGE
from polyloop.adapters.container._errors import ContainerError
from polyloop.adapters.container._image import ensure_docker_image


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m polyloop.adapters.container",
        description="Tools of PolyLoop's container code executor.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    build = commands.add_parser(
        "build-image",
        help="build the Docker image the docker backend runs by default",
        description="Build a Docker image holding this machine's Python, for DockerBackend. "
        "Prints the tag and the image id.",
    )
    build.add_argument(
        "tag",
        nargs="?",
        default=DEFAULT_DOCKER_IMAGE,
        metavar="TAG",
        help=f"image tag (default: {DEFAULT_DOCKER_IMAGE})",
    )
    return parser


def main(argv: Sequence[str]) -> int:
    arguments = _parser().parse_args(list(argv))  # exits 2 on bad usage, 0 after --help
    try:
        image_id = asyncio.run(ensure_docker_image(arguments.tag))
    except ContainerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{arguments.tag} {image_id}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
