"""What a new user reads first: `polyloop --help` lists every command by section, and `view`'s
help names the file it writes by default (issue 36)."""

from __future__ import annotations

from pathlib import Path

from polyloop import testing
from polyloop.stores.sqlite import SqliteRunStore
from polyloop.types import StopReason
from polyloop_cli.main import SECTIONS, cli
from polyloop_cli.view import page_name
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


async def test_view_writes_the_default_page_its_help_names(
    sqlite_path: Path, tmp_path: Path, env: dict[str, str]
) -> None:
    """`view RUN_ID` without -o writes ./RUN_ID.html, as its help says; a run id with other
    characters gets its safe characters and a digest (never a path outside the directory)."""
    async with SqliteRunStore(sqlite_path) as store:
        for run_id in ("nightly-7.2", "../x y"):
            step = testing.final_step(run_id, 0, "done")
            finished = testing.run_finished(run_id, [step], StopReason.AGENT_FINISHED)
            await testing.write_records(
                store, [testing.run_started(run_id), *step.records, finished]
            )
    helped = polyloop("view", "--help", env=env)
    assert "default ./RUN_ID.html" in " ".join(helped.stdout.split())
    work = tmp_path / "work"
    work.mkdir()
    store = ("--store", f"sqlite://{sqlite_path}")
    for run_id, name in (("nightly-7.2", "nightly-7.2.html"), ("../x y", page_name("../x y"))):
        result = polyloop("view", run_id, *store, env=env, cwd=work)
        assert 0 == result.code, result.stderr
        assert f"wrote {name} " in result.stdout
        assert [name] == [path.name for path in work.iterdir() if path.name == name]
    assert 2 == len(list(work.iterdir()))
