"""`python -m polyloop.adapters.container build-image`: its arguments, parsed by argparse."""

from __future__ import annotations

import subprocess
import sys

import pytest

from polyloop.adapters.container._backends import DEFAULT_DOCKER_IMAGE


def command(*args: str) -> subprocess.CompletedProcess[str]:
    """The module run as a user runs it, with no docker reachable on PATH: any build attempt
    would fail, so an exit 0 proves nothing was built."""
    return subprocess.run(
        [sys.executable, "-m", "polyloop.adapters.container", *args],
        capture_output=True,
        text=True,
        env={"PATH": "/nonexistent"},
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_of_build_image_prints_usage_and_builds_nothing(flag: str) -> None:
    """`build-image --help` prints the command's usage with the default tag and exits 0."""
    result = command("build-image", flag)
    assert (0, "") == (result.returncode, result.stderr)
    assert result.stdout.startswith("usage: python -m polyloop.adapters.container build-image")
    assert f"default: {DEFAULT_DOCKER_IMAGE}" in result.stdout


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        ((), "the following arguments are required: COMMAND"),
        (("bogus",), "invalid choice: 'bogus'"),
        (("build-image", "a", "b"), "unrecognized arguments: b"),
        (("build-image", "--tag=x"), "unrecognized arguments: --tag=x"),
    ],
)
def test_wrong_arguments_are_a_usage_error(args: tuple[str, ...], complaint: str) -> None:
    """Wrong arguments end with exit 2 and argparse's usage line, never as an image tag."""
    result = command(*args)
    assert (2, "") == (result.returncode, result.stdout)
    assert complaint in result.stderr.splitlines()[-1]
