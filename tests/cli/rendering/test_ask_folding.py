"""How an ask's arguments are shown (polyloop_cli.rendering.asks): at most 80 columns a line, nothing lost.

Property tests over arbitrary JSON arguments, wide characters included, and one run of the real
`polyloop pending` on an 80-column pseudo-terminal."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len

from polyloop.asking import AskKind, UserAsked
from polyloop.stores.sqlite import SqliteRunStore
from polyloop_cli.rendering.asks import ARGUMENT_WIDTH, argument_lines, fold
from tests.cli._kit import polyloop_on_terminal
from tests.cli.commands.test_asks_commands import NOTE, _park

_text = st.text(st.characters(exclude_categories=("Cs", "Cc")), max_size=200)
_json: Any = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)


def _ask(arguments: dict[str, Any]) -> UserAsked:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return UserAsked(
        "r",
        0,
        AskKind.APPROVAL,
        f"CALL t {text}",
        "t",
        text,
        hashlib.sha256(text.encode()).hexdigest(),
        None,
        None,
        None,
        None,
        "2026-01-01T00:00:00+00:00",
    )


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(_text, _json, max_size=5))
def test_every_line_fits_and_the_pieces_hold_the_whole_json(arguments: dict[str, Any]) -> None:
    """Folded lines of arguments nested less than 30 deep fit 80 columns, and the pieces,
    joined, are the indented JSON without the line breaks folding added."""
    lines = argument_lines(_ask(arguments), margin="    ")
    assert [] == [line for line in lines if cell_len(line) > ARGUMENT_WIDTH]
    pretty = json.dumps(arguments, indent=2, sort_keys=True, ensure_ascii=False)
    assert "".join(pretty.split()) == "".join("".join(lines).split())


@given(_text, st.integers(min_value=12, max_value=120))
def test_fold_keeps_every_character_in_order(line: str, width: int) -> None:
    """fold only cuts: its pieces, without the added indent, are the line again."""
    pieces = fold(line, width, indent="")
    rebuilt = pieces[0] + "".join(piece.removeprefix("    ") for piece in pieces[1:])
    assert "".join(line.split()) == "".join(rebuilt.split())
    assert [] == [piece for piece in pieces if cell_len(piece) > width]


async def test_pending_on_an_80_column_terminal_keeps_the_arguments_within_80(
    sqlite_store: SqliteRunStore, sqlite_path: Path, tmp_path: Path
) -> None:
    """On a real 80-column terminal no argument line is wrapped by the terminal or cut."""
    from tests.batch._kit import batch_env

    await _park(sqlite_store, "wide", gated=True, note=NOTE)
    screen = polyloop_on_terminal(
        "pending", "--store", f"sqlite://{sqlite_path}", env=batch_env(tmp_path / "home")
    )
    assert 0 == screen.code, screen.stdout
    lines = screen.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "arguments (sha256" in line)
    end = next(i for i, line in enumerate(lines) if "decide with:" in line)
    block = lines[start + 1 : end]
    assert [] == [line for line in block if cell_len(line) > 80]
    assert NOTE.replace(" ", "") in "".join(line.strip() for line in block).replace(" ", "")
