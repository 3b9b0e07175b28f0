"""The README's "A run that waits for a person" section: its status table is the library's
mapping (STATUS_OF_STOP_REASON and RunStatus), and its commands work when pasted."""

from __future__ import annotations

import re
from pathlib import Path

from polyloop.recovery import STATUS_OF_STOP_REASON, RunStatus
from tests.cli._kit import pasted, users_shell
from tests.cli.test_readme_commands import ROOT, readme_block

HEADING = "## A run that waits for a person"


def _table() -> dict[str, set[str]]:
    """Status word → the stop reasons its row lists, from the section's table."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index(HEADING) :]
    section = section[: section.index("\n## ", len(HEADING))]
    # The body rows: the header's first cell is `Status()`, not a status word.
    rows = [line for line in section.splitlines() if re.match(r"\| `[a-z_]+` \|", line)]
    assert rows, "the section has no status table"
    table: dict[str, set[str]] = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        status = cells[0].strip("`")
        assert status not in table, f"{status} has two rows"
        table[status] = set(re.findall(r"`([a-z_]+)`", cells[2]))
    return table


def test_the_status_table_is_status_of_stop_reason() -> None:
    """Every RunStatus has one row; a finished status lists exactly the stop reasons mapped to
    it, and every stop reason is listed once; the unfinished ones list none."""
    table = _table()
    assert {status.value for status in RunStatus} == set(table)
    mapped: dict[str, set[str]] = {status.value: set() for status in RunStatus}
    for reason, status in STATUS_OF_STOP_REASON.items():
        mapped[status.value].add(reason.value)
    assert mapped == table


def test_the_sections_commands_work_when_pasted(tmp_path: Path) -> None:
    """`polyloop demo --approval` then `polyloop pending`, pasted from the clone: the pending
    list names the demo's parked refund."""
    env = users_shell(tmp_path / "home")
    commands = readme_block(HEADING)
    assert [".venv/bin/polyloop demo --approval", ".venv/bin/polyloop pending"] == commands
    demo = pasted(commands[0], env=env, cwd=ROOT)
    assert 0 == demo.code, demo.stderr
    listed = pasted(commands[1], env=env, cwd=ROOT)
    assert 0 == listed.code, listed.stderr
    assert "approval of issue_refund at step 1" in listed.stdout
