"""The pages of ``polyloop view`` and the console's run pages: one run's trajectory, a store's
list of runs, and a fork beside its source (designs 0048, 0061, 0071).

What each page shows is read here into plain values; the HTML is the Jinja templates' in
``templates/viewer/`` (autoescape on). Each page is one self-contained document — its style
and script inline, no network, no font or library fetched — that opens from disk.

Every value shown goes through the templates' ``text`` filter (:func:`text`): HTML special
characters become entities and control characters (an ANSI escape's ``ESC``, a NUL) become
their visible Unicode pictures, so a reply holding ``<script>`` or colour codes is shown as the
characters it holds; a value a template forgot to filter is still escaped by autoescape. The
full text of a long observation or reply is not in the page's HTML: it is one string of a JSON
array in a ``<script type="application/json">`` block (the ``json_block`` filter writes ``<``,
``>`` and ``&`` as ``\\u`` escapes, so the block cannot be closed early) and put in place, as
text, when its fold is first opened. A 1,000-step page of 20,000-character observations then
parses and lays out only the previews.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from polyloop.asking import AskKind, UserAnswered, UserAsked
from polyloop.ports import DecisionParser, RunLog
from polyloop.recovery import is_parse_failure, run_status
from polyloop.session import RebuiltPrompt
from polyloop.types import (
    ActionStatus,
    Intent,
    IntentKind,
    Message,
    ModelCallResult,
    ModelReply,
    StepCompleted,
    StepRecord,
    StopReason,
)
from polyloop_cli.rendering.inspection import plan_report
from polyloop_cli.rendering.tokens import run_tokens, run_usage, tokens_of
from polyloop_console.viewer.lineage import ComparePage, Lineage
from polyloop_console.viewer.pending import PendingStep, pending_step

__all__ = [
    "FOLD_CHARS",
    "STOP_WHY",
    "Fold",
    "RunEntry",
    "RunPage",
    "compare_page",
    "index_page",
    "run_page",
    "text",
]

#: How many characters of a call's arguments the step list shows.
PREVIEW_CHARS = 60

#: Texts longer than this are folded: a preview of this many characters, the rest on request.
FOLD_CHARS = 2_000

#: How much of a step's history message is shown (the whole is the reply or observation above).
HISTORY_PREVIEW_CHARS = 300

#: Why a run stops, per stop reason, in one sentence (the page adds the step that did it).
STOP_WHY: Mapping[StopReason, str] = {
    StopReason.TASK_COMPLETED: "the environment confirmed the goal after an action (it "
    "reported completion, or a completes_run tool executed).",
    StopReason.STEP_BUDGET: "the run made the budget's max_steps model calls.",
    StopReason.PARSE_FAILED_REPEATEDLY: "max_consecutive_parse_failures replies in a row "
    "could not be parsed into a decision.",
    StopReason.CONTEXT_OVERFLOW: "the next prompt would have exceeded max_prompt_chars.",
    StopReason.ENV_ERROR: "the environment failed to execute an action and can no longer serve.",
    StopReason.LLM_ERROR: "the model call failed.",
    StopReason.AGENT_FINISHED: "the model gave a final answer without touching the environment.",
    StopReason.ACTION_BUDGET: "the run executed the budget's max_actions actions.",
    StopReason.CANCELLED: "the run was cancelled.",
    StopReason.RESUME_STATE_UNKNOWN: "resume found a side effect in doubt whose replay policy "
    "is never: it did not repeat it and stopped, since it may or may not have happened.",
}

_BUDGETS = (
    ("max_steps", "steps"),
    ("max_actions", "executed actions"),
    ("max_consecutive_parse_failures", "parse failures in a row"),
    ("max_prompt_chars", "prompt characters (largest prompt)"),
)

#: What ``StepCompleted.replayed_on_resume`` says resume made again.
_REPLAYED = {IntentKind.MODEL_CALL: "model call", IntentKind.ACTION: "action"}

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def _picture(match: re.Match[str]) -> str:
    code = ord(match.group())
    return "\u2421" if code == 0x7F else chr(0x2400 + code)


def pictured(value: str) -> str:
    """``value`` with each control character (but tab and newline) as its Unicode picture."""
    return _CONTROL.sub(_picture, value)


def text(value: object) -> str:
    """``value`` as HTML text: escaped, control characters as their visible pictures."""
    raw = pictured(str(value))
    return (
        raw.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _text_filter(value: object) -> Markup:
    return Markup(text(value))  # escaped by text(): the pages' one escaping


def _json_block(value: object) -> Markup:
    """JSON that a ``<script type="application/json">`` element holds safely: nothing in it can
    end the element or open a comment."""
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    data = data.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return Markup(data)  # no markup character is left in it


def _thousands(value: int) -> str:
    return f"{value:,}"


TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["text"] = _text_filter
    environment.filters["json_block"] = _json_block
    environment.filters["thousands"] = _thousands
    loader = environment.loader
    assert loader is not None

    def inline(name: str) -> Markup:
        # The page's own style and scripts, written inline as they are (no template syntax).
        return Markup(loader.get_source(environment, f"viewer/{name}")[0])

    environment.globals["inline"] = inline
    environment.globals["FOLD_CHARS"] = FOLD_CHARS
    return environment


_JINJA = _environment()


def _render(name: str, **context: Any) -> str:
    return _JINJA.get_template(f"viewer/{name}").render(**context)


# ---------------------------------------------------------------------------
# what a page shows, as values
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fold:
    """A text as the page shows it: whole, or a preview and its place in the JSON block."""

    preview: str
    length: int
    css: str
    #: The text's index in the page's block of full texts; ``None``: shown whole.
    index: int | None = None


class _Folds:
    """Long texts: a preview in the page, the whole in the page's JSON block."""

    def __init__(self) -> None:
        self.full: list[str] = []

    def fold(self, value: str, css: str) -> Fold:
        if len(value) <= FOLD_CHARS:
            return Fold(value, len(value), css)
        self.full.append(pictured(value))
        return Fold(value[:FOLD_CHARS], len(value), css, len(self.full) - 1)


@dataclass(frozen=True, slots=True)
class ListItem:
    """A step's entry in the step list."""

    step: int
    css: str
    bold: str
    preview: str
    replayed: bool = False
    #: The source run a fork copied this step from (``None``: the run's own step).
    inherited_from: str | None = None


@dataclass(frozen=True, slots=True)
class IntentLine:
    result_id: str
    kind: str
    replay_policy: str
    settled: str
    #: ``replayed`` (resume made it again), ``not_again`` (never completed, not run again by
    #: the resume that finished the run) or ``""``.
    again: str


@dataclass(frozen=True, slots=True)
class HistoryLine:
    """A message a step added to the history: its role, size and beginning."""

    role: str
    chars: int
    preview: str
    rest: str


@dataclass(frozen=True, slots=True)
class MessageView:
    role: str
    call: str
    label: str
    content: Fold


@dataclass(frozen=True, slots=True)
class ReplyView:
    thinking: Fold | None
    content: Fold


@dataclass(frozen=True, slots=True)
class ActionView:
    tool: str | None
    #: The tool's arguments pretty-printed, or the action's code.
    body: Fold | None


@dataclass(frozen=True, slots=True)
class StepCard:
    """A completed step's card."""

    pending: ClassVar[bool] = False

    step: int
    css: str
    decision: str
    status: str
    replayed: str | None
    facts: tuple[tuple[str, str], ...]
    reply: ReplyView | None
    rewritten: Fold | None
    failure: str | None
    raw: Fold | None
    parse_error: Fold | None
    action: ActionView | None
    calls_not_executed: tuple[tuple[str, str], ...]
    observation: Fold
    observation_note: str
    history: tuple[HistoryLine, ...] | None
    intents: tuple[IntentLine, ...]
    inherited_from: str | None
    fork_point: str | None


@dataclass(frozen=True, slots=True)
class PendingCard:
    """The card of the step announced and never completed."""

    pending: ClassVar[bool] = True

    step: int
    css: str
    title: str
    state: str
    detail: str
    facts: tuple[tuple[str, str], ...]
    reply: ReplyView | None
    failure: str | None
    action: ActionView
    source: str
    ask: tuple[tuple[str, str], ...] | None
    intents: tuple[IntentLine, ...]


@dataclass(frozen=True, slots=True)
class RunPage:
    """What one run's page shows: the log (or what could be read of it) and why not all."""

    run_id: str
    log: RunLog
    store: str
    #: The store's account of why it cannot read the log whole; ``None`` when it could.
    damage: str | None = None
    #: With ``damage``: one line per record that could not be read.
    unreadable: tuple[str, ...] = ()
    #: Where the store-wide list is, relative to this page (``None``: no list).
    index_href: str | None = None
    #: The messages sent to the model, rebuilt from the agent's request (``view --agent``);
    #: ``None``: the page says the log does not hold them (design 0061).
    prompt: RebuiltPrompt | None = None
    #: The ``--agent`` that built ``prompt`` and ``parser``.
    agent: str | None = None
    #: The agent's decision parser, to read an unfinished step's reply (``view --agent``).
    parser: DecisionParser | None = None
    #: Why ``--agent`` could not rebuild the messages (the page says so).
    prompt_problem: str | None = None
    #: A fork's source and ancestors, as read from the store (design 0071); ``None`` for a run
    #: that is no fork.
    lineage: Lineage | None = None
    #: Where the page of this fork beside its source is (``None``: none was made).
    compare_href: str | None = None


def _usage_text(usage: Mapping[str, int] | None) -> str:
    if not usage:
        return ""
    return " ".join(f"{key}={value:,}" for key, value in sorted(usage.items()))


def decision_words(step: StepRecord, result: ModelCallResult | None) -> tuple[str, str]:
    """(css class, words) for what the reply was taken to mean."""
    if result is not None and result.reply is None:
        return "bad", "model call failed"
    if step.tool_name is not None:
        if step.action_status is ActionStatus.NOT_EXECUTED:
            return "bad", f"tool call {step.tool_name}, rejected"
        return "act", f"tool call {step.tool_name}"
    if step.action is not None:
        return "act", "action (code)"
    if step.parse_ok:
        return "final", "final answer"
    if step.parse_error is not None:
        return "bad", "invalid reply: no decision"
    return "bad", "model call failed"


def _settled(
    intent: Intent, results: Mapping[str, ModelCallResult], completed: StepCompleted | None
) -> str:
    if intent.kind is IntentKind.MODEL_CALL:
        result = results.get(intent.result_id)
        if result is None:
            return "no result recorded"
        if result.reply is not None:
            return "reply recorded"
        return f"failure recorded: {result.failure}"
    if completed is not None and completed.result_id == intent.result_id:
        assert completed.action_outcome is not None
        return f"outcome recorded: {completed.action_outcome.status.value}"
    return "no outcome recorded"


def stop_words(log: RunLog, damage: str | None = None) -> tuple[str, str]:
    """(heading, sentence): the stop reason and why, or where an unfinished run stands."""
    if damage is not None:
        return "log damaged", "the store cannot read this log whole; shown: what could be read."
    if log.finished is not None:
        reason = log.finished.result.stop_reason
        why = STOP_WHY.get(reason, "")
        if log.steps:
            last = log.steps[-1].step
            why += f" Last step: {last.step_idx}."
        return reason.value, why
    plan = plan_report(log).plan
    return f"unfinished ({plan.state.value})", f"resume would {plan.move.value}: {plan.reason}"


def _budget_rows(log: RunLog, steps: Sequence[StepRecord]) -> list[tuple[str, str]]:
    snapshot = log.started.parameter_snapshot if log.started else {}
    executed = sum(1 for step in steps if step.action_status is ActionStatus.EXECUTED)
    run = 0
    worst = 0
    for step in steps:
        run = run + 1 if is_parse_failure(step) else 0
        worst = max(worst, run)
    used = {
        "max_steps": len(steps),
        "max_actions": executed,
        "max_consecutive_parse_failures": worst,
        "max_prompt_chars": max((step.prompt_chars for step in steps), default=0),
    }
    rows = []
    for key, words in _BUDGETS:
        limit = snapshot.get(f"request.budget.{key}")
        rows.append(
            (f"budget: {words}", f"{used[key]:,} of {limit}" if limit else f"{used[key]:,}")
        )
    return rows


def preview(value: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _list_label(step: StepRecord, decision: str) -> tuple[str, str]:
    """(bold part, preview) of a step's entry in the step list: the tool and its arguments, the
    code's first line, the answer, or the decision's words."""
    if step.tool_name is not None:
        return step.tool_name, preview(step.tool_arguments or "")
    if step.action is not None:
        return "code", preview(step.action)
    if step.parse_ok:
        return "final", preview(step.raw_output)
    return decision, ""


def pretty_arguments(arguments: str | None) -> str:
    if arguments is None:
        return ""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def _action(
    folds: _Folds, tool_name: str | None, arguments: str | None, action: str | None
) -> ActionView:
    if tool_name is not None:
        return ActionView(tool_name, folds.fold(pretty_arguments(arguments), "args"))
    if action is not None:
        return ActionView(None, folds.fold(action, "code"))
    return ActionView(None, None)


def _reply(folds: _Folds, reply: ModelReply) -> ReplyView:
    thinking = folds.fold(reply.thinking, "thinking") if reply.thinking else None
    return ReplyView(thinking, folds.fold(reply.content, "reply"))


def _reply_facts(reply: ModelReply | None) -> list[tuple[str, str]]:
    if reply is None:
        return []
    facts = [("finish reason", reply.finish_reason or "—")]
    if reply.usage:
        facts.append(("tokens", f"{tokens_of(reply.usage):,} ({_usage_text(reply.usage)})"))
    return facts


def _intent_lines(
    intents: Sequence[Intent],
    results: Mapping[str, ModelCallResult],
    completed: StepCompleted | None,
    finished: bool,
) -> tuple[IntentLine, ...]:
    replayed = None if completed is None else completed.replayed_on_resume
    lines = []
    for intent in intents:
        again = ""
        if intent.kind is replayed:
            again = "replayed"
        elif completed is None and intent.kind is IntentKind.ACTION and finished:
            again = "not_again"
        lines.append(
            IntentLine(
                intent.result_id,
                intent.kind.value,
                intent.replay_policy.value,
                _settled(intent, results, completed),
                again,
            )
        )
    return tuple(lines)


def _ask_facts(ask: UserAsked, answer: UserAnswered | None) -> tuple[tuple[str, str], ...]:
    """The ask of a step and the decision on it, when one is recorded."""
    what = "question" if ask.kind is AskKind.QUESTION else "approval"
    facts = [("asked", f"{what}, at {ask.asked_at}"), ("arguments sha256", ask.arguments_sha256)]
    if ask.policy_name:
        facts.append(("policy", ask.policy_name))
    if ask.question is not None:
        facts.append(("question", ask.question))
    if answer is None:
        # The step names the ask a decision answers (design 0059): `approve … --step N`.
        facts.append(("decision", f"none yet; decide it naming --step {ask.step}"))
    else:
        who = f" by {answer.decided_by}" if answer.decided_by else ""
        facts.append(("decision", f"{answer.verdict.value}{who} at {answer.decided_at}"))
        if answer.reason:
            facts.append(("reason", answer.reason))
        if answer.answer is not None:
            facts.append(("answer", answer.answer))
    return tuple(facts)


def _pending(
    folds: _Folds, pending: PendingStep, results: Mapping[str, ModelCallResult], finished: bool
) -> tuple[ListItem, PendingCard]:
    """(list item, card) of the step announced and never completed."""
    if pending.tool_name is not None:
        bold, shown = pending.tool_name, preview(pending.arguments or "")
    elif pending.action is not None:
        bold, shown = "code", preview(pending.action)
    else:
        bold, shown = "unfinished", ""
    css = f"pending {pending.kind}"
    item = ListItem(
        pending.step, css, bold, f"{shown} — {pending.state}" if shown else pending.state
    )
    card = PendingCard(
        pending.step,
        css,
        pending.tool_name or "unfinished step",
        pending.state,
        pending.detail,
        tuple(_reply_facts(pending.reply)),
        None if pending.reply is None else _reply(folds, pending.reply),
        pending.failure,
        _action(folds, pending.tool_name, pending.arguments, pending.action),
        "Source: " + pending.source,
        None if pending.ask is None else _ask_facts(pending.ask, pending.answer),
        _intent_lines(pending.intents, results, None, finished),
    )
    return item, card


def _message(folds: _Folds, message: Message, label: str) -> MessageView:
    content = "".join(block.text for block in message.content)
    call = f" · {message.tool_call_id}" if message.tool_call_id else ""
    return MessageView(message.role.value, call, label, folds.fold(content, "message"))


def _history_line(message: Message) -> HistoryLine:
    """A message a step added to the history: its role, size and beginning, not a second
    copy of a long observation (the whole is shown above, as the step recorded it)."""
    content = "".join(block.text for block in message.content)
    role = message.role.value + (f" · {message.tool_call_id}" if message.tool_call_id else "")
    more = len(content) - HISTORY_PREVIEW_CHARS
    rest = f"… ({more:,} more characters, as above)" if more > 0 else ""
    return HistoryLine(role, len(content), content[:HISTORY_PREVIEW_CHARS], rest)


def _task(page: RunPage, folds: _Folds) -> dict[str, Any]:
    """The goal and the messages sent to the model, or what the log says of them (design 0061)."""
    log = page.log
    started = log.started
    assert started is not None
    snapshot = started.parameter_snapshot
    task: dict[str, Any] = {
        "queued_input": None
        if started.queued_input is None
        else folds.fold(started.queued_input, "message"),
        "follows_run_id": started.follows_run_id,
        "problem": page.prompt_problem,
        "agent": page.agent,
        "prompt": page.prompt,
    }
    prompt = page.prompt
    if prompt is None:
        task["facts"] = [
            ("tools offered", snapshot.get("request.tools", "not recorded")),
            ("tool section", snapshot.get("request.tool_section_template", "not recorded")),
            ("observation template", snapshot.get("request.observation_template", "—")),
            ("tools sent natively", snapshot.get("request.native_tools", "false")),
        ]
        return task
    goal_start = len(prompt.prefix) - prompt.goal_messages
    task["goal"] = [_message(folds, message, "goal") for message in prompt.prefix[goal_start:]]
    recorded = [completed.step.prompt_chars for completed in log.steps]
    mismatch = next(
        (
            k
            for k, chars in enumerate(recorded)
            if k < len(prompt.chars_before) and prompt.chars_before[k] != chars
        ),
        None,
    )
    if mismatch is None:
        task["check"] = (
            f"its size matches the prompt size recorded by each of the {len(recorded):,} steps"
            if recorded
            else "no step recorded a prompt size to compare with"
        )
        task["check_css"] = "rebuilt"
    else:
        task["check"] = (
            f"it does NOT match the run: step {mismatch} recorded "
            f"{recorded[mismatch]:,} prompt characters, the rebuilt messages hold "
            f"{prompt.chars_before[mismatch]:,} — this agent's request is not the one the run "
            "was started with, so these messages are not what its model was sent"
        )
        task["check_css"] = "missing"
    task["prefix"] = [
        _message(folds, message, "goal" if index >= goal_start else "")
        for index, message in enumerate(prompt.prefix)
    ]
    return task


def _step_card(
    folds: _Folds,
    completed: StepCompleted,
    own: Sequence[Intent],
    results: Mapping[str, ModelCallResult],
    history: Sequence[tuple[Message, ...]],
    finished: bool,
    lineage: Lineage | None,
) -> tuple[ListItem, StepCard]:
    step = completed.step
    k = step.step_idx
    model_intent = next((i for i in own if i.kind is IntentKind.MODEL_CALL), None)
    result = None if model_intent is None else results.get(model_intent.result_id)
    reply = None if result is None else result.reply
    css, decision = decision_words(step, result)
    replayed = completed.replayed_on_resume
    inherited = lineage.source_run_id if lineage and k < lineage.at_step else None
    fork_point = lineage.source_run_id if lineage and k == lineage.at_step else None
    bold, shown = _list_label(step, decision)
    item = ListItem(k, css, bold, shown, replayed is not None, inherited)
    note = []
    if step.observation_is_synthetic:
        note.append("synthetic: written by the library")
    if step.observation_truncated_chars:
        note.append(f"{step.observation_truncated_chars:,} chars cut by the executor")
    if step.env_reported_completion:
        note.append("the environment reported completion")
    card = StepCard(
        step=k,
        css=css,
        decision=decision,
        status="" if step.action_status is None else step.action_status.value,
        replayed=None if replayed is None else _REPLAYED[replayed],
        facts=(
            ("parse", "ok" if step.parse_ok else "failed"),
            ("prompt chars", f"{step.prompt_chars:,}"),
            ("wall", f"{step.step_wall_ms:,} ms"),
            ("call id", step.call_id or "—"),
            *_reply_facts(reply),
        ),
        reply=None if reply is None else _reply(folds, reply),
        rewritten=folds.fold(step.raw_output, "reply")
        if reply is not None and step.raw_output != reply.content
        else None,
        failure=None if result is None or reply is not None else str(result.failure),
        raw=folds.fold(step.raw_output, "reply") if result is None else None,
        parse_error=None if step.parse_error is None else folds.fold(step.parse_error, "bad"),
        action=_action(
            folds,
            step.tool_name,
            step.tool_arguments,
            step.action if step.tool_name is None else None,
        )
        if step.action is not None or step.tool_name is not None
        else None,
        calls_not_executed=tuple(
            (call.tool_name, call.tool_arguments) for call in step.calls_not_executed
        ),
        observation=folds.fold(step.observation, "observation"),
        observation_note="; ".join(note),
        history=tuple(_history_line(m) for m in history[k]) if k < len(history) else None,
        intents=_intent_lines(own, results, completed, finished) if own else (),
        inherited_from=inherited,
        fork_point=fork_point,
    )
    return item, card


def run_page(page: RunPage) -> str:
    """The HTML of one run's page."""
    log = page.log
    results = {result.result_id: result for result in log.model_results}
    intents: dict[int, list[Intent]] = {}
    for intent in log.intents:
        intents.setdefault(intent.call_index, []).append(intent)
    steps = [completed.step for completed in log.steps]
    folds = _Folds()
    items: list[ListItem] = []
    cards: list[StepCard | PendingCard] = []
    history = page.prompt.history if page.prompt is not None else ()
    finished = log.finished is not None
    for completed in log.steps:
        own = intents.get(completed.step.step_idx, [])
        item, card = _step_card(folds, completed, own, results, history, finished, page.lineage)
        items.append(item)
        cards.append(card)
    pending = pending_step(log, page.parser, page.agent) if page.damage is None else None
    if pending is not None:
        pending_item, pending_card = _pending(folds, pending, results, finished)
        items.append(pending_item)
        cards.append(pending_card)
    heading, why = stop_words(log, page.damage)
    snapshot = log.started.parameter_snapshot if log.started else {}
    final_answer = None if log.finished is None else log.finished.result.final_answer
    summary = [("stop reason", heading), ("why", why)]
    if page.damage is None and log.started is not None:
        summary.append(("status word", run_status(log).value))
    if log.started is not None:
        summary.append(("started", log.started.started_at or "— (the log predates start times)"))
    summary.append(("steps", f"{len(steps):,}"))
    if pending is not None:
        summary.append((f"step {pending.step}", pending.state))
    tokens = run_tokens(log)
    if tokens is not None:
        summary.append(("tokens", f"{tokens:,} ({_usage_text(run_usage(log))})"))
    summary += _budget_rows(log, steps)
    return _render(
        "run.html",
        page=page,
        items=items,
        cards=cards,
        summary=summary,
        answer=None if not final_answer else folds.fold(final_answer, "reply"),
        parameters=sorted(snapshot.items()),
        task=_task(page, folds) if log.started is not None else None,
        lineage=page.lineage,
        full_texts=folds.full,
    )


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One row of the store-wide list."""

    run_id: str
    #: ``finished``, ``unfinished``, ``running`` or ``corrupt`` (as ``polyloop runs``).
    status: str
    stop_reason: str | None
    steps: int | None
    tokens: int | None
    model: str
    #: The run's page, relative to the list (``None``: no page was written).
    href: str | None
    #: Seed 002's status word (``succeeded``, ``running``, ``waiting_approval``…; ``None``
    #: for a damaged log).
    run_status: str | None = None
    #: The steps' wall time summed, in milliseconds (``None``: nothing could be read).
    wall_ms: int | None = None
    #: What the run was asked, in one line: the rebuilt goal (``--agent``) or a follow-up's
    #: input; ``""`` when the log does not say (design 0061).
    task: str = ""
    #: ``RunStarted.started_at`` (UTC, ISO 8601); ``None`` for a log written before the loop
    #: recorded it (design 0061).
    started_at: str | None = None


def _duration(milliseconds: int) -> str:
    if milliseconds < 1_000:
        return f"{milliseconds} ms"
    seconds = milliseconds / 1_000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return (
        f"{minutes} min {rest:02d} s"
        if minutes < 60
        else f"{minutes // 60} h {minutes % 60:02d} min"
    )


@dataclass(frozen=True, slots=True)
class Cell:
    """A cell of the list with its sort key: numbers sort as numbers, text as text."""

    shown: object
    sort: object
    css: str = ""


def _started_cell(started_at: str | None) -> Cell:
    """The start time as recorded, sorting by the instant it names (text would sort offsets
    other than UTC out of order); "—", sorting first, for a log that has none."""
    if started_at is None:
        return Cell("—", -1, "muted")
    try:
        instant = datetime.datetime.fromisoformat(started_at)
    except ValueError:
        return Cell(started_at, -1)
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=datetime.UTC)
    return Cell(started_at, int(instant.timestamp()))


def _number(value: int | None, shown: str) -> Cell:
    return Cell("" if value is None else shown, -1 if value is None else value, "num")


#: The list's columns: (heading, sort kind, tooltip).
_HEADINGS = (
    ("run", "text", ""),
    (
        "started",
        "number",
        "When the run started (UTC); — for a log written before the loop recorded it.",
    ),
    ("duration", "number", "The steps' wall time, summed."),
    ("status word", "text", "The host's status word (seed 002)."),
    ("status", "text", ""),
    ("stop reason", "text", ""),
    ("steps", "number", ""),
    ("tokens", "number", "Every recorded reply's tokens, summed."),
    ("model", "text", ""),
    ("task", "text", "The goal, when rebuilt with --agent, or a follow-up's input."),
)


def index_page(store: str, entries: Iterable[RunEntry], unreadable: Sequence[str] = ()) -> str:
    """The HTML of the store-wide list: one row per run, filterable, sortable by each column
    (click a heading), each linking to its page."""
    rows = []
    reasons: set[str] = set()
    for entry in entries:
        ending = entry.stop_reason or entry.status
        reasons.add(ending)
        cells = (
            _started_cell(entry.started_at),
            _number(entry.wall_ms, "" if entry.wall_ms is None else _duration(entry.wall_ms)),
            Cell(entry.run_status or "", entry.run_status or ""),
            Cell(entry.status, entry.status),
            Cell(entry.stop_reason or "", entry.stop_reason or ""),
            _number(entry.steps, "" if entry.steps is None else str(entry.steps)),
            _number(entry.tokens, "" if entry.tokens is None else f"{entry.tokens:,}"),
            Cell(entry.model, entry.model),
            Cell(entry.task, entry.task, "task"),
        )
        rows.append({"entry": entry, "ending": ending, "cells": cells})
    return _render(
        "index.html",
        store=store,
        rows=rows,
        reasons=sorted(reasons),
        unreadable=unreadable,
        headings=_HEADINGS,
    )


#: How many characters of an observation or action the side-by-side page shows in a cell.
COMPARE_CHARS = 600


@dataclass(frozen=True, slots=True)
class Side:
    """One run's step in the side-by-side page."""

    #: ``act``, ``bad``, ``final``, ``pending`` (announced, not completed) or ``none``.
    css: str
    #: The decision in words; for ``none``, why the run has no such step.
    decision: str
    tool: str | None = None
    #: The tool's arguments pretty-printed, or the action's code (cut to COMPARE_CHARS).
    action: str = ""
    status: str = ""
    observation: str | None = None
    observation_chars: int = 0
    #: Characters of the action and the observation not shown (the run's page has them).
    cut: int = 0
    #: What decides whether two steps made the same decision.
    key: tuple[object, ...] = ()


@dataclass(frozen=True, slots=True)
class Pair:
    """Step ``step`` of the source and of the fork, side by side."""

    step: int
    source: Side
    fork: Side

    @property
    def same(self) -> bool:
        """Both runs took the step and decided alike (the same kind, tool and arguments,
        code or answer); their observations may still differ (the world moved)."""
        return bool(self.source.key) and self.source.key == self.fork.key

    @property
    def verdict(self) -> str:
        """The row in words: ``same decision``, ``different decision``, ``fork only`` or
        ``source only``."""
        if self.same:
            return "same decision"
        if self.source.css == "none":
            return "fork only"
        if self.fork.css == "none":
            return "source only"
        return "different decision"


def _cut(value: str) -> tuple[str, int]:
    if len(value) <= COMPARE_CHARS:
        return value, 0
    return value[:COMPARE_CHARS], len(value) - COMPARE_CHARS


def _model_results(log: RunLog) -> dict[int, ModelCallResult]:
    """Each step's model-call result, by step."""
    by_id = {result.result_id: result for result in log.model_results}
    return {
        intent.call_index: by_id[intent.result_id]
        for intent in log.intents
        if intent.kind is IntentKind.MODEL_CALL and intent.result_id in by_id
    }


def _side(log: RunLog, k: int, results: Mapping[int, ModelCallResult]) -> Side:
    if k < len(log.steps):
        completed = log.steps[k]
        step = completed.step
        result = results.get(k)
        css, decision = decision_words(step, result)
        if step.tool_name is not None:
            body = pretty_arguments(step.tool_arguments)
        elif step.action is not None:
            body = step.action
        elif step.parse_ok:
            body = step.raw_output
        else:
            body = step.parse_error or ""
        action, cut_action = _cut(body)
        observation, cut_observation = _cut(step.observation)
        # A final answer has no observation: nothing to show.
        shown = None if css == "final" and not step.observation else observation
        return Side(
            css,
            decision,
            None,
            action,
            "" if step.action_status is None else step.action_status.value,
            shown,
            len(step.observation),
            cut_action + cut_observation,
            (css, decision, step.tool_name, body),
        )
    pending = pending_step(log) if k == len(log.steps) else None
    if pending is not None:
        body = pretty_arguments(pending.arguments) if pending.tool_name else pending.action or ""
        action, cut_action = _cut(body)
        return Side("pending", pending.state, pending.tool_name, action, cut=cut_action)
    heading, _ = stop_words(log)
    last = len(log.steps) - 1
    if log.finished is not None:
        return Side("none", f"no step {k}: stopped ({heading}) after step {last}")
    return Side("none", f"no step {k}: {heading} after step {last}")


def compare_rows(source: RunLog, fork: RunLog, at_step: int) -> list[Pair]:
    """Each step from ``at_step`` on that either run took or started, source beside fork."""

    def end(log: RunLog) -> int:
        started = pending_step(log) is not None
        return len(log.steps) + (1 if started else 0)

    source_results, fork_results = _model_results(source), _model_results(fork)
    return [
        Pair(k, _side(source, k, source_results), _side(fork, k, fork_results))
        for k in range(at_step, max(end(source), end(fork), at_step))
    ]


def compare_page(page: ComparePage) -> str:
    """The HTML of a fork beside its source, step by step from the fork step on (design 0071):
    each step's decision, action and observation, and how each run stopped."""
    fork_heading, fork_why = stop_words(page.fork)
    source_heading, source_why = stop_words(page.source)
    return _render(
        "compare.html",
        page=page,
        lineage=page.lineage,
        source_href=page.lineage.chain[0].href,
        rows=compare_rows(page.source, page.fork, page.lineage.at_step),
        ends={
            "source": (source_heading, source_why, _final(page.source), len(page.source.steps)),
            "fork": (fork_heading, fork_why, _final(page.fork), len(page.fork.steps)),
        },
    )


def _final(log: RunLog) -> str | None:
    return None if log.finished is None else log.finished.result.final_answer
