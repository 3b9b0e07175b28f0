"""Every error the CLI (and the set-up's uv bootstrap) reports: one line, a headline of at most ~200 characters before any
detail, saying what to do, and no ".;" (a sentence end glued to the next clause).

Two walks: over the source (every `CliError(...)` and click usage error the package can raise,
its literal text with each interpolation counted as a short value), and over real invocations
that trigger each exit code of design 0015.
"""

from __future__ import annotations

import ast
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import polyloop_cli
from polyloop_cli.shared.errors import HEADLINE_LIMIT
from tests.cli._kit import assert_one_line_error, headline, polyloop

PACKAGE = Path(polyloop_cli.__file__).parent
#: The set-up's uv bootstrap: its errors are the first a newcomer may see.
BOOTSTRAP = Path(__file__).resolve().parents[2] / "scripts" / "bootstrap_uv.py"
#: What an interpolated value ({path}, {run_id}, …) counts for in the static walk.
VALUE = "v" * 12
RAISERS = {"CliError", "UsageError", "BadParameter", "BootstrapError"}


def _text(node: ast.expr) -> str | None:
    """The literal text of a message expression, interpolations as VALUE; None if not text."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(
            part.value if isinstance(part, ast.Constant) else VALUE for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.IfExp):
        branches = [_text(node.body), _text(node.orelse)]
        return None if None in branches else max(branches, key=len)  # type: ignore[arg-type]
    if isinstance(node, ast.Call):
        return VALUE  # e.g. damaged_message(...): checked where it is defined
    if isinstance(node, ast.Name):
        return VALUE
    return None


def messages() -> Iterator[tuple[str, str]]:
    """(where, text) of every message passed to an error the CLI raises."""
    for path in [*sorted(PACKAGE.rglob("*.py")), BOOTSTRAP]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name not in RAISERS or not node.args:
                continue
            argument = node.args[1] if name == "CliError" and len(node.args) > 1 else node.args[0]
            text = _text(argument)
            assert text is not None, f"{path.name}:{node.lineno}: message is not text"
            yield f"{path.name}:{node.lineno}", text
    # Headlines built by helpers, checked with their longest advice.
    from polyloop_cli.shared.stores import StoreUrl, damaged_message

    yield "damaged_message", damaged_message(VALUE, StoreUrl("sqlite", Path(VALUE)), VALUE * 4)


ALL_MESSAGES = list(messages())


def test_the_source_walk_finds_the_errors() -> None:
    """The walk sees the package's raise sites (so the rules below are not vacuous)."""
    assert len(ALL_MESSAGES) >= 30


@pytest.mark.parametrize(("where", "text"), ALL_MESSAGES, ids=[where for where, _ in ALL_MESSAGES])
def test_every_message_in_the_source_is_one_short_line(where: str, text: str) -> None:
    """No newline, no ".;", and at most the headline limit with short values interpolated."""
    assert (where, False, False) == (where, "\n" in text, ".;" in text)
    assert len(text) <= HEADLINE_LIMIT, (where, len(text), text)


@pytest.fixture
def places(tmp_path: Path) -> dict[str, Path]:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "text.sqlite").write_text("not a database\n")
    with sqlite3.connect(tmp_path / "other.sqlite") as connection:
        connection.execute("CREATE TABLE t (x)")
    connection.close()
    return {"tmp": tmp_path}


INVOCATIONS = [
    (("show",), 2),
    (("verify", "--store", "jsonl:{tmp}/empty"), 2),
    (("show", "r", "--steps", "9-1", "--store", "jsonl:{tmp}/empty"), 2),
    (("no-such-command",), 2),
    (("demo", "--base-url", "http://127.0.0.1:9/v1"), 2),
    (("runs", "--store", "mysql://db/x"), 3),
    (("runs", "--store", "memory:"), 3),
    (("runs", "--store", "sqlite://host/x.sqlite"), 3),
    (("runs", "--store", ""), 3),
    (("runs", "--store", "{tmp}/nowhere"), 3),
    (("runs", "--store", "sqlite://{tmp}/no/x.sqlite"), 4),
    (("runs", "--store", "jsonl://{tmp}/no"), 4),
    (("runs",), 4),
    (("show", "nope", "--store", "jsonl://{tmp}/empty"), 5),
    (("plan", "nope", "--store", "jsonl://{tmp}/empty"), 5),
    (("export", "nope", "--store", "jsonl://{tmp}/empty"), 5),
    (("verify", "nope", "--store", "jsonl://{tmp}/empty"), 5),
    (("runs", "--store", "{tmp}/etc"), 7),
    (("runs", "--store", "sqlite://{tmp}/etc"), 7),
    (("runs", "--store", "sqlite://{tmp}/text.sqlite"), 7),
    (("runs", "--store", "sqlite://{tmp}/other.sqlite"), 7),
    (("runs", "--store", "jsonl://{tmp}/text.sqlite"), 7),
    (("demo", "--store", "jsonl://{tmp}/etc"), 7),
    (("demo", "--base-url", "http://127.0.0.1:9/v1", "--model", "m"), 8),
    (("batch", "{tmp}/etc/hosts", "--agent", "x:y"), 21),
    (("batch", "/dev/null", "--agent", "no_such_module:factory"), 22),
]


@pytest.mark.parametrize(("args", "code"), INVOCATIONS, ids=[" ".join(a) for a, _ in INVOCATIONS])
def test_every_error_a_user_can_cause_is_one_line_saying_what_to_do(
    places: dict[str, Path], env: dict[str, str], args: tuple[str, ...], code: int
) -> None:
    """Exit code of its class, one line, headline within the limit (paths written short)."""
    tmp = places["tmp"]
    result = polyloop(*(arg.format(tmp=tmp) for arg in args), env=env, cwd=tmp)
    assert_one_line_error(result, code)
    words = headline(result).replace(str(tmp), "P").replace(env["POLYLOOP_HOME"], "P")
    assert (False, True) == (".;" in result.stderr, len(words) <= HEADLINE_LIMIT), words
