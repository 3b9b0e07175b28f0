"""What the console's and the viewer's browser tests share: one headless Debian ``chromium`` per
test module, driven by playwright's Python package (``executable_path``: no browser is
downloaded). A test that asks for it fails, never skips, when chromium is missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (`apt-get install -y chromium`, "
            "as .ci/install-system does)."
        )
    with sync_playwright() as driver:
        # The tests run as root here and in CI, where chromium's sandbox cannot start.
        launched = driver.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        yield launched
        launched.close()
