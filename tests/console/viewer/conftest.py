"""Fixtures of the viewer's tests: an isolated POLYLOOP_HOME, as the CLI's tests have."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli._kit import clean_env


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return clean_env(tmp_path / "home")
