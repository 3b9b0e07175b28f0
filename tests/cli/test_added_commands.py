"""Commands other distributions add through the ``polyloop.commands`` entry points
(``serve``, ``worker`` and ``view`` of polyloop-console, designs 0068 and 0071): found when
installed, and a clear refusal naming what to install when not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli._kit import clean_env, polyloop

#: The console is installed in the workspace's environment, and uninstalling it would break
#: the other tests sharing it; so its absence is made by hiding the entry points in a child
#: interpreter (the one place this module stands in for a real uninstall).
WITHOUT_CONSOLE = (
    "import importlib.metadata as m\n"
    "m.entry_points = lambda **selection: []\n"
    "from polyloop_cli.main import main\n"
    "import sys\n"
    "main(sys.argv[1:])\n"
)


def test_serve_and_worker_come_from_the_console(tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home")
    listed = polyloop("--help", env=env)
    assert 0 == listed.code
    assert "serve" in listed.stdout
    assert "worker" in listed.stdout
    assert "view" in listed.stdout
    helped = polyloop("serve", "--help", env=env)
    assert 0 == helped.code
    assert "--tokens FILE" in helped.stdout
    assert "127.0.0.1" in helped.stdout


@pytest.mark.parametrize(
    "command", [("serve", "--port", "1"), ("view", "some-run", "-o", "page.html"), ("worker",)]
)
def test_without_the_console_a_command_says_what_to_install(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """`polyloop serve`, `worker` and `view` come with polyloop-console: without it, exit 2
    and the line that says what to install; nothing written."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_CONSOLE, *command],
        cwd=tmp_path,
        env=clean_env(tmp_path / "home"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert 2 == done.returncode
    assert f"`polyloop {command[0]}` comes with the polyloop-console distribution" in done.stderr
    assert "pip install polyloop-console" in done.stderr
    assert "Traceback" not in done.stderr
    assert [] == list(tmp_path.glob("*.html"))


def test_serve_refuses_a_missing_store_without_making_a_token(tmp_path: Path) -> None:
    home = tmp_path / "home"
    refused = polyloop("serve", "--port", "1", env=clean_env(home))
    assert 0 != refused.code
    assert "polyloop demo" in refused.stderr
    assert not (home / "console-token").exists()


def test_the_cli_does_not_depend_on_the_console() -> None:
    """`pip install polyloop-cli` brings no web server: the console is not among its
    requirements, extras included."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "packages/polyloop-cli/pyproject.toml").read_text())["project"]
    required = list(project["dependencies"])
    for extra in project.get("optional-dependencies", {}).values():
        required += extra
    assert [] == [r for r in required if r.startswith(("polyloop-console", "starlette", "uvicorn"))]
