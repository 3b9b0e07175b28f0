"""Fixtures of the batch tests: the local Ray cluster, started once per session when needed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.batch._ray_cluster import RayCluster, start_cluster


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A head and a second node on loopback (about 10 s to start on an idle machine)."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
