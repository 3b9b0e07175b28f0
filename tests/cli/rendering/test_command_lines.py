"""A printed command fits the width and still pastes as one command (issue 36, design 0060).

`command_lines` lays a command out with ` \\` line continuations; the property checks that the
lines, with the continuations removed as the shell removes them, are the same words, and a few
layouts go through a real bash. `pending` and `show` then fit 80 columns, piped with
`COLUMNS=80` and on a real 80-column terminal, and a command they print runs when pasted.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.cells import cell_len

from polyloop.stores.sqlite import SqliteRunStore
from polyloop_cli.rendering.invocation import command_lines
from tests.cli._kit import (
    one_line,
    pasted,
    polyloop,
    polyloop_on_terminal,
    printed_commands,
)
from tests.cli.commands.test_asks_commands import NOTE, _park

_word = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"), max_codepoint=0x9FFF),
    max_size=90,
)
_option = st.builds(
    lambda name: f"--{name}", st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
)


def _read_back(lines: list[str]) -> list[str]:
    """The words a POSIX shell reads from ``lines`` (line continuations removed first)."""
    return shlex.split(one_line("\n".join(lines)))


@given(
    st.lists(st.one_of(_word, _option), min_size=1, max_size=12),
    st.integers(min_value=12, max_value=120),
    st.sampled_from(["", "  ", "    "]),
)
def test_command_lines_fit_the_width_and_read_back_as_the_same_words(
    words: list[str], width: int, indent: str
) -> None:
    """Every line fits ``width`` columns; every line but the last ends in a continuation; the
    words read back are the command's."""
    command = " ".join(shlex.quote(word) for word in ["polyloop", *words])
    lines = command_lines(command, width, indent=indent)
    assert [] == [line for line in lines if cell_len(line) > width]
    assert all(line.endswith("\\") for line in lines[:-1])
    assert ["polyloop", *words] == _read_back(lines)


def test_without_a_width_a_command_stays_one_line() -> None:
    command = "polyloop approve " + "r" * 200
    assert [f"  {command}"] == command_lines(command, None, indent="  ")


@pytest.mark.parametrize("width", [16, 30, 80])
def test_bash_reads_the_laid_out_command_as_the_same_words(tmp_path: Path, width: int) -> None:
    """The lines as pasted into bash (not shlex): the program sees the same arguments."""
    words = [
        "--store",
        "sqlite:///" + "/deep" * 20 + "/runs.sqlite",
        "--episode",
        '{"ledger": "/a b/it\'s here/ledger.jsonl", "退款": "商品破损"}',
        "--reason",
        "…",
        "run-" + "x" * 70,
    ]
    command = " ".join(shlex.quote(word) for word in ["printf", "%s\\0", *words])
    lines = command_lines(command, width, indent="    ")
    assert [] == [line for line in lines if cell_len(line) > width]
    script = "\n".join(lines) + "\n"
    assert 0 == subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode
    ran = subprocess.run(["bash"], input=script, capture_output=True, text=True, check=True)
    assert words == ran.stdout.split("\0")[:-1]


async def test_pending_and_show_fit_80_columns_piped_and_a_printed_command_runs(
    tmp_path: Path,
) -> None:
    """`COLUMNS=80 polyloop pending --store URL` (a long URL), `show` and `plan`: every line fits 80
    columns; the approve command, pasted with its continuations, records the approval."""
    from tests.batch._kit import ROOT, batch_env

    deep = tmp_path / ("a-rather-long-directory-name-" * 3) / "runs.sqlite"
    deep.parent.mkdir(parents=True)
    async with SqliteRunStore(deep) as store:
        await _park(store, "r-wide-" + "x" * 30, gated=True, note=NOTE)
    env = {**batch_env(tmp_path / "home"), "COLUMNS": "80"}
    url = f"sqlite://{deep}"
    listed = polyloop("pending", "--store", url, env=env, cwd=ROOT)
    assert 0 == listed.code, listed.stderr
    lines = listed.stdout.splitlines()
    assert [] == [line for line in lines if cell_len(line) > 80], listed.stdout
    start = next(i for i, line in enumerate(lines) if "decide with:" in line)
    commands = printed_commands(lines[start + 1 :])
    assert ["approve", "reject", "edit"] == [shlex.split(one_line(c))[1] for c in commands]
    assert url == shlex.split(one_line(commands[0]))[-1]
    for inspecting in ("show", "plan"):
        shown = polyloop(inspecting, "r-wide-" + "x" * 30, "--store", url, env=env, cwd=ROOT)
        assert 0 == shown.code, shown.stderr
        assert [] == [line for line in shown.stdout.splitlines() if cell_len(line) > 80]
    approved = pasted(commands[0], env=env, cwd=ROOT)
    assert 0 == approved.code, approved.stderr
    assert "approved." in approved.stdout
    async with SqliteRunStore(deep) as store:
        (answer,) = (await store.read_log("r-wide-" + "x" * 30)).answers
    assert "approve" == answer.verdict.value


async def test_pending_on_an_80_column_terminal_fits_and_its_commands_paste(
    sqlite_store: SqliteRunStore, sqlite_path: Path, tmp_path: Path
) -> None:
    """On a real 80-column terminal every line of `pending` fits (none is wrapped by the
    terminal) and each printed command reads back as one command naming the run."""
    from tests.batch._kit import batch_env

    run_id = "r-terminal-" + "y" * 40
    await _park(sqlite_store, run_id, gated=True)
    screen = polyloop_on_terminal(
        "pending", "--store", f"sqlite://{sqlite_path}", env=batch_env(tmp_path / "home")
    )
    assert 0 == screen.code, screen.stdout
    lines = [line.rstrip() for line in screen.stdout.splitlines()]
    assert [] == [line for line in lines if cell_len(line) > 80]
    start = next(i for i, line in enumerate(lines) if "decide with:" in line)
    commands = printed_commands(line for line in lines[start + 1 :] if line)
    assert 3 == len(commands), commands
    assert all(run_id in shlex.split(one_line(command)) for command in commands)
