"""Stores reach the command through the entry-point group ``polyloop.stores``, keyed by URL
scheme: a third-party store installed beside the CLI is inspected with every command, like the
shipped ones, which register the same way.

The third-party store (``tests/cli/shared/third_party/textlog_store.py``) is installed the way a wheel
installs it: its module and a ``.dist-info`` with ``entry_points.txt`` in a directory on
``PYTHONPATH``, which ``importlib.metadata`` reads like ``site-packages``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from polyloop.serialization import dumps
from polyloop.stores.urls import ENTRY_POINT_GROUP, open_store_url, store_factories
from polyloop.types import ReplayPolicy, StopReason
from tests.cli._kit import (
    Completed,
    action_intent,
    assert_one_line_error,
    finished,
    model_intent,
    model_result,
    polyloop,
    started,
    tool_step,
    tool_step_records,
    write,
)

THIRD_PARTY = Path(__file__).parent / "third_party" / "textlog_store.py"
FINISHED = "finished-run"
CRASHED = "crashed-run"


def install(
    site: Path, entry_points: dict[str, str], *, name: str = "textlog-store"
) -> dict[str, str]:
    """Install the third-party store into ``site`` as distribution ``name`` registering
    ``entry_points`` (scheme → object reference); the environment that sees it."""
    site.mkdir(parents=True, exist_ok=True)
    shutil.copy(THIRD_PARTY, site / THIRD_PARTY.name)
    info = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    lines = [f"[{ENTRY_POINT_GROUP}]", *(f"{k} = {v}" for k, v in entry_points.items())]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return {"PYTHONPATH": str(site)}


TEXTLOG = {
    "textlog": "textlog_store:open_url",
    "textlog-unlisted": "textlog_store:open_url_without_listing",
}


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The third-party store installed in a directory this process also imports from."""
    directory = tmp_path / "site"
    install(directory, TEXTLOG)
    monkeypatch.syspath_prepend(str(directory))
    return directory


async def fill(url: str) -> None:
    """A run finished by its completing tool after two steps, and a run killed inside a ``never`` action."""
    store = open_store_url(url)
    await write(  # type: ignore[arg-type]
        store,
        [
            started(FINISHED),
            *tool_step_records(FINISHED, 0, "lookup", ReplayPolicy.SAFE),
            *tool_step_records(FINISHED, 1, "close", ReplayPolicy.NEVER),
            finished(
                FINISHED,
                StopReason.TASK_COMPLETED,
                [tool_step(0, "lookup"), tool_step(1, "close")],
            ),
            started(CRASHED),
            *tool_step_records(CRASHED, 0, "lookup", ReplayPolicy.SAFE),
            model_intent(CRASHED, 1),
            model_result(CRASHED, 1, "CALL close {}"),
            action_intent(CRASHED, 1, ReplayPolicy.NEVER),
        ],
    )


async def test_a_third_party_store_is_inspected_with_every_command(
    site: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """runs, show, plan, verify and export read a store that only its entry point names."""
    url = f"textlog://{tmp_path / 'logs'}"
    await fill(url)
    env = {**env, "PYTHONPATH": str(site)}

    runs = polyloop("runs", "--store", url, "--json", env=env)
    assert (0, "") == (runs.code, runs.stderr)
    assert [(FINISHED, "finished", 2), (CRASHED, "unfinished", 1)] == [
        (row["run_id"], row["status"], row["steps"]) for row in runs.json()["runs"]
    ]
    shown = polyloop("show", FINISHED, "--store", url, "--json", env=env)
    assert (0, [0, 1]) == (shown.code, [step["step"] for step in shown.json()["steps"]])
    plan = polyloop("plan", CRASHED, "--store", url, "--json", env=env).json()
    assert ("action_in_doubt", "stop_state_unknown") == (plan["state"], plan["move"])
    verified = polyloop("verify", "--all", "--store", url, "--json", env=env)
    assert (0, True) == (verified.code, verified.json()["ok"])
    exported = polyloop("export", FINISHED, "--store", url, env=env)
    steps = (tool_step(0, "lookup"), tool_step(1, "close"))
    assert "".join(dumps(step) + "\n" for step in steps) == exported.stdout


def test_the_shipped_stores_register_through_the_same_group() -> None:
    """sqlite, jsonl, postgresql and postgres are entry points of polyloop-stores."""
    shipped = {
        scheme: entry_point.value
        for scheme, entry_point in store_factories().items()
        if entry_point.dist is not None and entry_point.dist.name == "polyloop-stores"
    }
    assert {
        "sqlite": "polyloop.stores.urls:open_sqlite_url",
        "jsonl": "polyloop.stores.urls:open_jsonl_url",
        "postgresql": "polyloop.stores.urls:open_postgres_url",
        "postgres": "polyloop.stores.urls:open_postgres_url",
    } == shipped


def test_a_scheme_nobody_registered_is_a_bad_url_naming_the_installed_ones(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Without the plugin installed its scheme is exit 3, and the message lists what is."""
    result = polyloop("runs", "--store", f"textlog://{tmp_path}", env=env)
    assert_one_line_error(result, 3)
    assert "unknown store scheme 'textlog'" in result.stderr
    assert "jsonl:, postgres:, postgresql:, sqlite:" in result.stderr


def test_two_packages_claiming_one_scheme_are_named_both(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """A scheme registered by two distributions is refused, naming both of them."""
    install(tmp_path / "one", {"textlog": "textlog_store:open_url"}, name="textlog-store")
    install(tmp_path / "two", {"textlog": "other_module:open"}, name="textlog-fork")
    env = {**env, "PYTHONPATH": f"{tmp_path / 'one'}:{tmp_path / 'two'}"}
    result = polyloop("runs", "--store", f"textlog://{tmp_path}", env=env)
    assert_one_line_error(result, 3)
    assert "textlog-store: textlog_store:open_url" in result.stderr
    assert "textlog-fork: other_module:open" in result.stderr


def test_a_factory_that_cannot_be_imported_is_a_bad_url_saying_so(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """An entry point whose module is missing is exit 3, not a traceback."""
    env = {**env, **install(tmp_path / "site", {"broken": "no_such_module:open"})}
    result = polyloop("runs", "--store", f"broken://{tmp_path}", env=env)
    assert_one_line_error(result, 3)
    assert "the store for broken: URLs cannot be loaded" in result.stderr


async def test_a_store_without_listing_is_read_run_by_run(
    site: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """A store with only the seed's six calls: runs says it cannot list (exit 7); show, plan,
    verify and export of a named run still work."""
    await fill(f"textlog://{tmp_path / 'logs'}")
    env = {**env, "PYTHONPATH": str(site)}
    url = f"textlog-unlisted://{tmp_path / 'logs'}"
    listing = polyloop("runs", "--store", url, env=env)
    assert_one_line_error(listing, 7)
    assert "cannot list its runs (no RunListing)" in listing.stderr
    verified = polyloop("verify", FINISHED, "--store", url, "--json", env=env)
    assert (0, [FINISHED]) == (verified.code, [run["run_id"] for run in verified.json()["runs"]])
    plan = polyloop("plan", CRASHED, "--store", url, "--json", env=env)
    assert (0, "action_in_doubt") == (plan.code, plan.json()["state"])


def test_a_url_the_factory_refuses_is_exit_3_with_its_message(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The factory's ConfigurationError is the user's bad URL, reported in one line."""
    env = {**env, **install(tmp_path / "site", TEXTLOG)}
    result = polyloop("runs", "--store", "textlog:relative/dir", env=env)
    assert_one_line_error(result, 3)
    assert "a textlog URL is textlog:///absolute/dir" in result.stderr
    as_json = polyloop("runs", "--store", "textlog:x", "--json", env=env)
    assert "bad_store_url" == json.loads(as_json.stderr)["error"]["kind"]


def test_a_postgres_url_without_the_driver_says_which_extra_to_install(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """With psycopg missing, ``--store postgresql://…`` is exit 3 naming the extra, in one
    line (the CLI itself never imports the driver)."""
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from polyloop_cli.main import main\n"
        "main(['runs', '--store', 'postgresql://runner:pw@db-1/runs'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False
    )
    result = Completed(done.returncode, done.stdout, done.stderr)
    assert_one_line_error(result, 3)
    assert ("polyloop-stores[postgres]" in result.stderr, ":pw@" in result.stderr) == (True, False)
