from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.adapters.gateway._server import FakeGateway, serve_in_thread


@pytest.fixture(scope="module")
def fake_gateway() -> Iterator[tuple[FakeGateway, str]]:
    """One real uvicorn server per test module; yields the app and its ``http://host:port``."""
    gateway = FakeGateway()
    with serve_in_thread(gateway) as root:
        yield gateway, root
