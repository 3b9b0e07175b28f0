"""What a new user reads first: `polyloop --help` lists every command by section (issue 36;
`view`'s help and default page: tests/console/viewer/test_command.py)."""

from __future__ import annotations

from polyloop_cli.main import SECTIONS, cli
from tests.cli._kit import polyloop


def _sections(help_text: str) -> dict[str, list[str]]:
    """The help's sections after the options: title → the command names listed under it."""
    sections: dict[str, list[str]] = {}
    title = None
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            sections[title] = []
        elif title is not None and line.startswith("  ") and not line.startswith("   "):
            sections[title].append(line.split()[0])
    return sections


def test_the_top_level_help_lists_every_command_in_a_section(env: dict[str, str]) -> None:
    """Each registered command is listed once, in one of SECTIONS (none left to "Other"); the
    deciding commands, `view` and `steps` are named in the prose too."""
    result = polyloop("--help", env=env)
    assert 0 == result.code, result.stderr
    sections = _sections(result.stdout)
    listed = [name for title, names in sections.items() if title != "Options" for name in names]
    assert sorted(cli.commands) == sorted(listed)
    assert "Other" not in sections
    assert [title for title, _ in SECTIONS] == [t for t in sections if t != "Options"]
    prose = " ".join(result.stdout.split("Options:")[0].split())
    for name in ("pending", "approve", "reject", "edit", "answer", "resume", "view", "steps"):
        assert f"`{name}`" in prose or f"polyloop {name}" in prose, name
