"""Settings shared by the whole test tree."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from tests import ast_parse_guard, kinds, serial_group, xdist_env

# In CI (CI=true) every property test draws the same examples on every run, so a landing is
# never decided by which random examples one run happened to draw; locally each run explores
# new ones. `HYPOTHESIS_PROFILE=explore` forces exploration anywhere.
settings.register_profile("ci", derandomize=True, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "explore")
)

# CPython 3.11's spurious "AST constructor recursion depth mismatch" (gh-106905) must not turn a
# failing test into a crashed run; design record 0042.
ast_parse_guard.install()


def pytest_addoption(parser: pytest.Parser) -> None:
    serial_group.add_option(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Kinds a test implies become markers; those that run alone are marked `serial`;
    `--test-group` picks one side."""
    kinds.mark_derived(items)
    serial_group.mark_and_select(config, items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    kinds.running(item)


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    kinds.running(None)


#: The API root of a running model server (scripts/model-test-server.sh; scripts/test.sh starts one).
MODEL_URL_VARIABLE = "POLYLOOP_TEST_MODEL_URL"


@pytest.fixture(scope="session")
def model_server_url() -> str:
    """The API root (``http://127.0.0.1:PORT/v1``) of the real model's OpenAI-compatible server
    (Gemma 3 270M on llama-cpp-python, design 0066). Fails, never skips, when none is named."""
    url = os.environ.get(MODEL_URL_VARIABLE, "").strip().rstrip("/")
    assert url, (
        f"{MODEL_URL_VARIABLE} is not set: this test needs the real model server. scripts/test.sh "
        'starts one; to run the test alone: dir="$(bash scripts/model-test-server.sh start)" && '
        f'export {MODEL_URL_VARIABLE}="$(cat "$dir/url")" (stop it with bash '
        'scripts/model-test-server.sh stop "$dir"; the first start builds it, minutes).'
    )
    return url


@pytest.fixture(autouse=True)
def _no_xdist_identity_for_child_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytest a test starts in a subprocess must not believe it is an xdist worker.

    pytest-xdist names each worker in the environment, which children inherit; a child pytest
    with syrupy then defers its snapshot report to a controller that does not exist, and the
    tests that read that report fail only in the parallel run. Removed per test (restored after
    it), so this worker's own session still knows what it is.
    """
    for name in xdist_env.XDIST_VARIABLES:
        monkeypatch.delenv(name, raising=False)
