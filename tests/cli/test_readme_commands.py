"""The README's `polyloop` section: every command works when pasted after the set-up."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli._kit import inspect_commands, pasted, users_shell

ROOT = Path(__file__).resolve().parents[2]


def readme_block(heading: str) -> list[str]:
    """The lines of the first ```bash block after ``heading`` in the README."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    start = section.index("```bash\n") + len("```bash\n")
    return section[start : section.index("```", start)].splitlines()


def test_the_setup_block_is_two_plain_commands() -> None:
    """The set-up block holds the two scripts and nothing a shell would misread (no comments)."""
    assert ["bash scripts/demo.sh", "bash scripts/test.sh"] == readme_block("## Set-up")
    assert (ROOT / "scripts" / "demo.sh").is_file()
    assert (ROOT / "scripts" / "test.sh").is_file()


@pytest.mark.slow
def test_every_command_of_the_cli_section_works_when_pasted(tmp_path: Path) -> None:
    """From the clone, in a shell without polyloop on PATH: the demo, then every other line
    with RUN_ID replaced by one of the demo's runs, and the demo's own Inspect lines."""
    env = users_shell(tmp_path / "home")
    first, *others = readme_block("## The `polyloop` command")
    assert ".venv/bin/polyloop demo" == first
    demo = pasted(first, env=env, cwd=ROOT)
    assert 0 == demo.code, demo.stderr
    listed = pasted(".venv/bin/polyloop runs --json", env=env, cwd=ROOT)
    run_id = json.loads(listed.stdout)["runs"][-1]["run_id"]
    for line in [*others, *inspect_commands(demo.stdout)]:
        assert line.startswith(".venv/bin/polyloop ")
        assert " | " not in line
        assert "#" not in line
        # The demo's `view RUN` writes ./RUN.html here, in the clone: taken away again.
        page = ROOT / f"{line.split()[-1]}.html"
        try:
            ran = pasted(line.replace("RUN_ID", run_id), env=env, cwd=ROOT)
            assert (line, 0) == (line, ran.code), ran.stderr
            assert page.is_file() == line.startswith(".venv/bin/polyloop view demo-")
        finally:
            if line.startswith(".venv/bin/polyloop view demo-"):
                page.unlink(missing_ok=True)
