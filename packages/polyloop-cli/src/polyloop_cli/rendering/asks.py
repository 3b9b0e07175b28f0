"""What a parked run waits on, in words: the JSON of an ask and its lines at 80 columns.

Functions of a :class:`~polyloop.types.UserAsked` (the pending ask, design 0037), used by
``pending``, ``show``, ``plan``, ``resume`` and the deciding commands. The arguments are shown as indented
JSON with sorted keys, every line folded to :data:`ARGUMENT_WIDTH` columns (wide characters
count twice), so that a person reads exactly what they approve on any terminal.
"""

from __future__ import annotations

import json
from typing import Any

from rich.cells import cell_len

from polyloop.asking import AskKind, UserAnswered, UserAsked
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output

__all__ = [
    "AGENT_PLACEHOLDER",
    "ARGUMENT_WIDTH",
    "DIGEST_SHOWN",
    "argument_lines",
    "ask_block",
    "ask_headline",
    "ask_json",
    "decide_commands",
    "decision_json",
    "fold",
]

#: The widest line of an ask's arguments or question, in terminal columns.
ARGUMENT_WIDTH = 80
#: How many hex digits of ``arguments_sha256`` the CLI shows (and accepts as ``--sha256``).
DIGEST_SHOWN = 12


def ask_json(ask: UserAsked) -> dict[str, Any]:
    """Every field of the ask, plus ``arguments`` (the arguments as a JSON value)."""
    return {
        "run_id": ask.run_id,
        "step": ask.step,
        "kind": ask.kind.value,
        "action": ask.action,
        "tool_name": ask.tool_name,
        "arguments": None if ask.arguments_json is None else json.loads(ask.arguments_json),
        "arguments_json": ask.arguments_json,
        "arguments_sha256": ask.arguments_sha256,
        "schema_sha256": ask.schema_sha256,
        "description_sha256": ask.description_sha256,
        "policy_name": ask.policy_name,
        "question": ask.question,
        "asked_at": ask.asked_at,
    }


def decision_json(answered: UserAnswered) -> dict[str, Any]:
    """A recorded decision (``UserAnswered``) as JSON, without the fields its ask has."""
    return {
        "verdict": answered.verdict.value,
        "arguments_json": answered.arguments_json,
        "reason": answered.reason,
        "answer": answered.answer,
        "decided_by": answered.decided_by,
        "decided_at": answered.decided_at,
    }


def ask_headline(ask: UserAsked) -> str:
    """``approval of issue_refund at step 2``, ``question at step 1``, and so on."""
    if ask.kind is AskKind.QUESTION:
        return f"question at step {ask.step}"
    what = ask.tool_name if ask.tool_name is not None else "a tool-less action"
    return f"approval of {what} at step {ask.step}"


def fold(line: str, width: int = ARGUMENT_WIDTH, *, indent: str = "") -> list[str]:
    """``line`` cut into pieces of at most ``width`` columns; each piece after the first starts
    with ``indent`` plus four spaces. Cut at a space where one is near the end of a piece."""
    if cell_len(line) <= width:
        return [line]
    pieces: list[str] = []
    continued = indent + "    "
    rest = line
    prefix = ""
    while cell_len(prefix + rest) > width:
        room = width - cell_len(prefix)
        cut, used = 0, 0
        for index, character in enumerate(rest):
            used += cell_len(character)
            if used > room:
                break
            cut = index + 1
        space = rest.rfind(" ", 0, cut)
        if space > cut // 2:
            cut = space + 1
        cut = max(cut, 1)
        pieces.append((prefix + rest[:cut]).rstrip())
        rest = rest[cut:]
        prefix = continued
    pieces.append(prefix + rest)
    return pieces


def argument_lines(ask: UserAsked, *, width: int = ARGUMENT_WIDTH, margin: str = "") -> list[str]:
    """The ask's arguments (or its tool-less action, or its question) as lines of at most
    ``width`` columns, each starting with ``margin``."""
    if ask.kind is AskKind.QUESTION:
        text = ask.question or ""
        source = text.splitlines() or [""]
    elif ask.arguments_json is not None:
        value = json.loads(ask.arguments_json)
        source = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines()
    else:
        source = ask.action.splitlines() or [""]
    lines: list[str] = []
    for line in source:
        body = line.lstrip(" ")
        indent = margin + line[: len(line) - len(body)]
        lines.extend(fold(indent + body, width, indent=indent))
    return lines


#: ``--agent`` of a run whose agent the CLI cannot know: the user's factory, to fill in.
AGENT_PLACEHOLDER = ("--agent", "MODULE:FACTORY")


def decide_commands(
    ask: UserAsked, option: tuple[str, ...], agent: tuple[str, ...] | None = None
) -> list[str]:
    """The commands that decide ``ask``, naming it by its step and bound to the digest of what
    is shown. ``agent``: the ``--agent``/``--episode`` words that build the run's agent, when
    known (the demo's); each command then continues the run at once. Unknown, ``edit`` (which
    needs it) names the :data:`AGENT_PLACEHOLDER`."""
    step = ("--step", str(ask.step))
    digest = (*step, "--sha256", ask.arguments_sha256[:DIGEST_SHOWN])
    then = agent or ()
    if ask.question is not None:
        return [suggest("answer", ask.run_id, "…", *step, *then, *option)]
    return [
        suggest("approve", ask.run_id, *digest, *then, *option),
        suggest("reject", ask.run_id, *digest, "--reason", "…", *then, *option),
        *(
            [
                suggest(
                    "edit",
                    ask.run_id,
                    *digest,
                    "--arguments",
                    "{…}",
                    *(agent or AGENT_PLACEHOLDER),
                    *option,
                )
            ]
            if ask.tool_name is not None
            else []
        ),
    ]


def ask_block(
    output: Output, ask: UserAsked, option: tuple[str, ...], agent: tuple[str, ...] | None = None
) -> None:
    """One ask as a block of lines: headline, policy, arguments (80 columns), the commands
    (``agent``: as :func:`decide_commands`), every line within :attr:`Output.columns`."""
    width = output.columns
    headline = f"run {ask.run_id} · {ask_headline(ask)} · asked {ask.asked_at}"
    for line in [headline] if width is None else fold(headline, width):
        output.line(line, style="bold")
    if ask.policy_name is not None:
        output.line(f"  gated by policy {ask.policy_name}")
    if ask.question is not None:
        output.line("  question:")
    elif ask.tool_name is not None:
        output.line(f"  arguments (sha256 {ask.arguments_sha256[:DIGEST_SHOWN]}):")
    else:
        output.line(f"  action (sha256 {ask.arguments_sha256[:DIGEST_SHOWN]}):")
    for line in argument_lines(ask, margin="    "):
        output.line(line)
    output.line("  decide with:" if agent is None else "  decide with (each continues the run):")
    for command in decide_commands(ask, option, agent):
        output.command(command, indent="    ", style="dim")
