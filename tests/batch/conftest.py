"""Fixtures of the batch tests: the local Ray cluster, started once per session when needed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.batch._ray_cluster import RayCluster, start_cluster
from tests.stores import _postgres

# Fixed before any test starts a child process, so that children name their schemas alike.
_postgres.claim_session_prefix()


@pytest.fixture(autouse=True)
def _drop_postgres_schemas() -> Iterator[None]:
    yield
    _postgres.drop_used_schemas()


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayCluster]:
    """A head and a second node on loopback (about 10 s to start on an idle machine)."""
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()
