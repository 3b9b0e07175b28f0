"""The pages of ``polyloop view``: one run's trajectory, and a store's list of runs (design 0048).

Pure functions of what was read; each page is one self-contained HTML document — its style and
script inline, no network, no font or library fetched — that opens from disk.

Everything shown comes from the log and is escaped once, here, by :func:`text`: HTML special
characters become entities and control characters (an ANSI escape's ``ESC``, a NUL) become
their visible Unicode pictures, so a reply holding ``<script>`` or colour codes is shown as the
characters it holds. The full text of a long observation or reply is not in the page's HTML:
it is one string of a JSON array in a ``<script type="application/json">`` block (with ``<``,
``>`` and ``&`` written as ``\\u`` escapes, so the block cannot be closed early) and put in
place, as text, when its fold is first opened. A 1,000-step page of 20,000-character
observations then parses and lays out only the previews.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from polyloop.ports import RunLog
from polyloop.recovery import is_parse_failure, pending_ask
from polyloop.types import (
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    StepCompleted,
    StepRecord,
    StopReason,
)
from polyloop_cli.inspection import plan_report
from polyloop_cli.view_assets import INDEX_SCRIPT, RUN_SCRIPT, STYLE

__all__ = [
    "FOLD_CHARS",
    "STOP_WHY",
    "RunEntry",
    "RunPage",
    "index_page",
    "run_page",
    "text",
]

#: Texts longer than this are folded: a preview of this many characters, the rest on request.
FOLD_CHARS = 2_000

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


def text(value: object) -> str:
    """``value`` as HTML text: escaped, control characters as their visible pictures."""
    raw = _CONTROL.sub(_picture, str(value))
    return (
        raw.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def _json_block(element_id: str, value: object) -> str:
    data = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    data = data.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f'<script type="application/json" id="{element_id}">{data}</script>'


class _Folds:
    """Long texts: a preview in the page, the whole in the page's JSON block."""

    def __init__(self) -> None:
        self.full: list[str] = []

    def block(self, value: str, *, css: str = "") -> str:
        shown = text(value[:FOLD_CHARS])
        if len(value) <= FOLD_CHARS:
            return f'<pre class="{css}">{shown}</pre>'
        index = len(self.full)
        # Folded: the full text is filled in, as text, the first time the fold is opened.
        self.full.append(_CONTROL.sub(_picture, value))
        return (
            f'<pre class="{css} preview">{shown}…</pre>'
            f'<details class="fold" data-full="{index}"><summary>show all {len(value):,} '
            f'characters ({len(value) - FOLD_CHARS:,} more)</summary><pre class="{css}"></pre>'
            "</details>"
        )


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


def _usage_text(usage: Mapping[str, int] | None) -> str:
    if not usage:
        return ""
    return " ".join(f"{key}={value:,}" for key, value in sorted(usage.items()))


def tokens_of(usage: Mapping[str, int]) -> int:
    """One number for a usage mapping: ``total_tokens`` if reported, else the sum of the
    top-level counts (nested details, named with a ``.``, are parts of those)."""
    if "total_tokens" in usage:
        return usage["total_tokens"]
    return sum(count for key, count in usage.items() if "." not in key)


def _decision(step: StepRecord, result: ModelCallResult | None) -> tuple[str, str]:
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


def _why(page: RunPage) -> tuple[str, str]:
    """(heading, sentence): the stop reason and why, or where an unfinished run stands."""
    log = page.log
    if page.damage is not None:
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
        rows.append((words, f"{used[key]:,} of {limit}" if limit else f"{used[key]:,}"))
    return rows


@dataclass(slots=True)
class _Totals:
    usage: dict[str, int] = field(default_factory=dict)

    def add(self, usage: Mapping[str, int] | None) -> None:
        for key, count in (usage or {}).items():
            self.usage[key] = self.usage.get(key, 0) + count


def _reply_of(result: ModelCallResult | None) -> ModelReply | None:
    return None if result is None else result.reply


def run_page(page: RunPage) -> str:
    """The HTML of one run's page."""
    log = page.log
    results = {result.result_id: result for result in log.model_results}
    intents: dict[int, list[Intent]] = {}
    for intent in log.intents:
        intents.setdefault(intent.call_index, []).append(intent)
    steps = [completed.step for completed in log.steps]
    folds = _Folds()
    totals = _Totals()
    cards: list[str] = []
    items: list[str] = []
    for completed in log.steps:
        step = completed.step
        k = step.step_idx
        own = intents.get(k, [])
        model_intent = next((i for i in own if i.kind is IntentKind.MODEL_CALL), None)
        result = None if model_intent is None else results.get(model_intent.result_id)
        reply = _reply_of(result)
        totals.add(None if reply is None else reply.usage)
        css, decision = _decision(step, result)
        status = "" if step.action_status is None else step.action_status.value
        replayed = completed.replayed_on_resume
        marks = (
            ""
            if replayed is None
            else f'<span class="mark replay" title="resume made this call again after a crash">'
            f"replayed on resume: {text(_REPLAYED[replayed])}</span>"
        )
        items.append(
            f'<li><a href="#step-{k}" data-step="{k}" class="{css}">'
            f'<span class="n">{k}</span> {text(decision)}'
            f"{' <span class=mark-dot title=replayed>↻</span>' if replayed else ''}</a></li>"
        )
        body = [
            f'<section class="step {css}" id="step-{k}" tabindex="-1" data-step="{k}">',
            f'<h2><a href="#step-{k}">Step {k}</a> <span class="decision">{text(decision)}</span>'
            f"{f' <span class=status>{text(status)}</span>' if status else ''}{marks}</h2>",
            '<dl class="facts">',
            _fact("parse", "ok" if step.parse_ok else "failed"),
            _fact("prompt chars", f"{step.prompt_chars:,}"),
            _fact("wall", f"{step.step_wall_ms:,} ms"),
            _fact("call id", step.call_id or "—"),
        ]
        if reply is not None:
            body.append(_fact("finish reason", reply.finish_reason or "—"))
            if reply.usage:
                body.append(_fact("tokens", _usage_text(reply.usage)))
        body.append("</dl>")
        body.append("<h3>Reply</h3>")
        if reply is not None:
            if reply.thinking:
                body.append(f"<h4>thinking ({len(reply.thinking):,} chars)</h4>")
                body.append(folds.block(reply.thinking, css="thinking"))
            body.append(folds.block(reply.content, css="reply"))
            if step.raw_output != reply.content:
                body.append("<h4>put into history (rewritten by the parser)</h4>")
                body.append(folds.block(step.raw_output, css="reply"))
        elif result is not None:
            body.append(f'<pre class="failure">{text(result.failure)}</pre>')
        else:
            body.append(folds.block(step.raw_output, css="reply"))
        body.append("<h3>Decision</h3>")
        if step.parse_error is not None:
            body.append(folds.block(step.parse_error, css="bad"))
        else:
            body.append(f"<p>{text(decision)}</p>")
        if step.action is not None or step.tool_name is not None:
            body.append("<h3>Action</h3>")
            if step.tool_name is not None:
                body.append(
                    f'<p class="tool">{text(step.tool_name)}</p>'
                    + folds.block(_pretty_arguments(step.tool_arguments), css="args")
                )
            if step.action is not None and step.tool_name is None:
                body.append(folds.block(step.action, css="code"))
        if step.calls_not_executed:
            body.append(
                f"<h3>Tool calls not executed <small>{len(step.calls_not_executed)} more in the "
                "reply; the model was told</small></h3><ul class=intents>"
            )
            for call in step.calls_not_executed:
                body.append(
                    f"<li><code>{text(call.tool_name)}</code> {text(call.tool_arguments)}</li>"
                )
            body.append("</ul>")
        observation_note = []
        if step.observation_is_synthetic:
            observation_note.append("synthetic: written by the library")
        if step.observation_truncated_chars:
            observation_note.append(
                f"{step.observation_truncated_chars:,} chars cut by the executor"
            )
        if step.env_reported_completion:
            observation_note.append("the environment reported completion")
        note = f" <small>({text('; '.join(observation_note))})</small>" if observation_note else ""
        body.append(f"<h3>Observation <small>{len(step.observation):,} chars</small>{note}</h3>")
        body.append(folds.block(step.observation, css="observation"))
        if own:
            body.append('<h3>Intents</h3><ul class="intents">')
            for intent in own:
                body.append(
                    f"<li><code>{text(intent.result_id)}</code> {text(intent.kind.value)}, "
                    f"replay policy <b>{text(intent.replay_policy.value)}</b>: "
                    f"{text(_settled(intent, results, completed))}"
                    f"{' <b class=replayed>— made again by resume</b>' if intent.kind is replayed else ''}"
                    "</li>"
                )
            body.append("</ul>")
        body.append("</section>")
        cards.append("".join(body))
    pending = _pending_html(log, intents, results)
    heading, why = _why(page)
    snapshot = log.started.parameter_snapshot if log.started else {}
    final_answer = None if log.finished is None else log.finished.result.final_answer
    summary = [
        _fact("stop reason", heading),
        _fact("why", why),
        _fact("steps", f"{len(steps):,}"),
    ]
    if totals.usage:
        summary.append(_fact("tokens", _usage_text(totals.usage)))
    for words, used in _budget_rows(log, steps):
        summary.append(_fact(f"budget: {words}", used))
    damage = ""
    if page.damage is not None:
        lines = "".join(f"<li>{text(line)}</li>" for line in page.unreadable)
        damage = (
            f'<div class="damage" role="alert"><b>Damaged log.</b> {text(page.damage)}'
            f"<ul>{lines}</ul></div>"
        )
    back = (
        f'<a class="back" href="{text(page.index_href)}">all runs</a> ' if page.index_href else ""
    )
    parameters = "".join(
        f"<tr><th>{text(key)}</th><td>{text(value)}</td></tr>"
        for key, value in sorted(snapshot.items())
    )
    answer = (
        f"<h3>Final answer</h3>{folds.block(final_answer, css='reply')}" if final_answer else ""
    )
    return _document(
        title=f"PolyLoop run {page.run_id}",
        body=(
            f"<header><div>{back}<h1>Run <code>{text(page.run_id)}</code></h1>"
            f'<p class="store">{text(page.store)}</p></div>'
            '<p class="keys">keys: <kbd>j</kbd>/<kbd>k</kbd> next/previous step, <kbd>g</kbd>/'
            "<kbd>G</kbd> first/last, <kbd>o</kbd> open/close folds, <kbd>p</kbd> parameters</p>"
            f"</header>{damage}"
            f'<nav id="steps" aria-label="steps"><ol>{"".join(items)}</ol></nav>'
            f'<main><section class="summary"><dl class="facts">{"".join(summary)}</dl>{answer}'
            f"</section>{''.join(cards)}{pending}</main>"
            f'<aside id="parameters" aria-label="parameter snapshot"><h2>Parameter snapshot</h2>'
            f"<table>{parameters}</table></aside>"
            f"{_json_block('full-texts', folds.full)}"
        ),
        script=RUN_SCRIPT,
    )


def _pretty_arguments(arguments: str | None) -> str:
    if arguments is None:
        return ""
    try:
        return json.dumps(json.loads(arguments), indent=2, ensure_ascii=False)
    except ValueError:
        return arguments


def _pending_html(
    log: RunLog, intents: Mapping[int, Sequence[Intent]], results: Mapping[str, ModelCallResult]
) -> str:
    """The intents of the step after the last recorded one: announced, never completed."""
    announced = intents.get(len(log.steps), ())
    if not announced:
        return ""
    rows = "".join(
        f"<li><code>{text(intent.result_id)}</code> {text(intent.kind.value)}, replay policy "
        f"<b>{text(intent.replay_policy.value)}</b>: {text(_settled(intent, results, None))}"
        f"{' — not executed again by resume' if intent.kind is IntentKind.ACTION and log.finished else ''}"
        "</li>"
        for intent in announced
    )
    ask = pending_ask(log)
    # The step names the ask a decision answers (design 0059): `approve … --step N`.
    waits = (
        ""
        if ask is None
        else f"<p class=ask>waits on the {text(ask.kind.value)} ask of step {ask.step}"
        f"{'' if ask.tool_name is None else f' ({text(ask.tool_name)})'}: decide it naming "
        f"<code>--step {ask.step}</code></p>"
    )
    return (
        f'<section class="step pending" id="step-{len(log.steps)}" tabindex="-1">'
        f"<h2>Step {len(log.steps)} <span class=decision>announced, never completed</span></h2>"
        f'{waits}<ul class="intents">{rows}</ul></section>'
    )


def _fact(name: str, value: str) -> str:
    return f"<dt>{text(name)}</dt><dd>{text(value)}</dd>"


def _document(*, title: str, body: str, script: str) -> str:
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # Nothing may be fetched: no network, no inline handler, scripts only from this page.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">"
        f"<title>{text(title)}</title><style>{STYLE}</style></head>"
        f"<body>{body}<script>{script}</script></body></html>"
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


def index_page(store: str, entries: Iterable[RunEntry], unreadable: Sequence[str] = ()) -> str:
    """The HTML of the store-wide list: one row per run, filterable, each linking to its page."""
    rows = []
    reasons: set[str] = set()
    for entry in entries:
        ending = entry.stop_reason or entry.status
        reasons.add(ending)
        name = (
            f'<a href="{text(entry.href)}">{text(entry.run_id)}</a>'
            if entry.href
            else text(entry.run_id)
        )
        rows.append(
            f'<tr data-ending="{text(ending)}"><td>{name}</td><td>{text(entry.status)}</td>'
            f"<td>{text(entry.stop_reason or '')}</td>"
            f"<td class=num>{'' if entry.steps is None else entry.steps}</td>"
            f"<td class=num>{'' if entry.tokens is None else f'{entry.tokens:,}'}</td>"
            f"<td>{text(entry.model)}</td></tr>"
        )
    options = "".join(f'<option value="{text(r)}">{text(r)}</option>' for r in sorted(reasons))
    problems = "".join(f"<li>{text(line)}</li>" for line in unreadable)
    damage = (
        f'<div class="damage" role="alert"><b>Could not be read:</b><ul>{problems}</ul></div>'
        if problems
        else ""
    )
    return _document(
        title=f"PolyLoop runs in {store}",
        body=(
            f"<header><div><h1>Runs</h1><p class=store>{text(store)}</p></div>"
            '<p class="keys">keys: <kbd>/</kbd> filter, <kbd>j</kbd>/<kbd>k</kbd> move, '
            "<kbd>Enter</kbd> open</p></header>"
            f"{damage}"
            '<main class="index"><p class="filters"><input id="filter" type="search" '
            'placeholder="filter: run id, model, stop reason…" aria-label="filter">'
            f'<select id="ending" aria-label="stop reason"><option value="">every ending</option>'
            f"{options}</select> <span id=count></span></p>"
            '<table id="runs"><thead><tr><th>run</th><th>status</th><th>stop reason</th>'
            "<th>steps</th><th>tokens</th><th>model</th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table></main>"
        ),
        script=INDEX_SCRIPT,
    )


def run_tokens(log: RunLog) -> int | None:
    """The run's tokens over every recorded reply (``None``: no reply reported usage)."""
    usages = [r.reply.usage for r in log.model_results if r.reply is not None and r.reply.usage]
    if not usages:
        return None
    return sum(tokens_of(usage) for usage in usages)
