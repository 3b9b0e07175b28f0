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

import datetime
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

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
from polyloop_cli.view_assets import INDEX_SCRIPT, RUN_SCRIPT, STYLE
from polyloop_cli.view_pending import PendingStep, pending_step

__all__ = [
    "FOLD_CHARS",
    "STOP_WHY",
    "RunEntry",
    "RunPage",
    "index_page",
    "run_page",
    "run_tokens",
    "run_usage",
    "text",
]

#: How many characters of a call's arguments the step list shows.
PREVIEW_CHARS = 60

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
    #: The messages sent to the model, rebuilt from the agent's request (``view --agent``);
    #: ``None``: the page says the log does not hold them (design 0061).
    prompt: RebuiltPrompt | None = None
    #: The ``--agent`` that built ``prompt`` and ``parser``.
    agent: str | None = None
    #: The agent's decision parser, to read an unfinished step's reply (``view --agent``).
    parser: DecisionParser | None = None
    #: Why ``--agent`` could not rebuild the messages (the page says so).
    prompt_problem: str | None = None


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


def _reply_of(result: ModelCallResult | None) -> ModelReply | None:
    return None if result is None else result.reply


def _preview(value: str, limit: int = PREVIEW_CHARS) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _list_label(step: StepRecord, decision: str) -> tuple[str, str]:
    """(bold part, preview) of a step's entry in the step list: the tool and its arguments, the
    code's first line, the answer, or the decision's words."""
    if step.tool_name is not None:
        return step.tool_name, _preview(step.tool_arguments or "")
    if step.action is not None:
        return "code", _preview(step.action)
    if step.parse_ok:
        return "final", _preview(step.raw_output)
    return decision, ""


def _list_item(k: int, css: str, bold: str, preview: str, *, replayed: bool = False) -> str:
    shown = f' <span class="args">{text(preview)}</span>' if preview else ""
    mark = " <span class=mark-dot title=replayed>↻</span>" if replayed else ""
    return (
        f'<li><a href="#step-{k}" data-step="{k}" class="{css}" title="{text(preview)}">'
        f'<span class="n">{k}</span> <b>{text(bold)}</b>{shown}{mark}</a></li>'
    )


def _action_html(
    folds: _Folds, tool_name: str | None, arguments: str | None, action: str | None
) -> str:
    if tool_name is not None:
        return f'<p class="tool">{text(tool_name)}</p>' + folds.block(
            _pretty_arguments(arguments), css="args"
        )
    if action is not None:
        return folds.block(action, css="code")
    return ""


def _reply_html(folds: _Folds, reply: ModelReply) -> list[str]:
    body = []
    if reply.thinking:
        body.append(f"<h4>thinking ({len(reply.thinking):,} chars)</h4>")
        body.append(folds.block(reply.thinking, css="thinking"))
    body.append(folds.block(reply.content, css="reply"))
    return body


def _reply_facts(reply: ModelReply | None) -> list[str]:
    if reply is None:
        return []
    facts = [_fact("finish reason", reply.finish_reason or "—")]
    if reply.usage:
        facts.append(_fact("tokens", f"{tokens_of(reply.usage):,} ({_usage_text(reply.usage)})"))
    return facts


def _intent_items(
    intents: Sequence[Intent],
    results: Mapping[str, ModelCallResult],
    completed: StepCompleted | None,
    finished: bool,
) -> str:
    replayed = None if completed is None else completed.replayed_on_resume
    rows = []
    for intent in intents:
        again = ""
        if intent.kind is replayed:
            again = " <b class=replayed>— made again by resume</b>"
        elif completed is None and intent.kind is IntentKind.ACTION and finished:
            again = " — not executed again by resume"
        rows.append(
            f"<li><code>{text(intent.result_id)}</code> {text(intent.kind.value)}, "
            f"replay policy <b>{text(intent.replay_policy.value)}</b>: "
            f"{text(_settled(intent, results, completed))}{again}</li>"
        )
    return f'<h3>Intents</h3><ul class="intents">{"".join(rows)}</ul>'


def _ask_html(ask: UserAsked, answer: UserAnswered | None) -> str:
    """The ask of a step and the decision on it, when one is recorded."""
    what = "question" if ask.kind is AskKind.QUESTION else "approval"
    facts = [
        _fact("asked", f"{what}, at {ask.asked_at}"),
        _fact("arguments sha256", ask.arguments_sha256),
    ]
    if ask.policy_name:
        facts.append(_fact("policy", ask.policy_name))
    if ask.question is not None:
        facts.append(_fact("question", ask.question))
    if answer is None:
        # The step names the ask a decision answers (design 0059): `approve … --step N`.
        facts.append(_fact("decision", f"none yet; decide it naming --step {ask.step}"))
    else:
        who = f" by {answer.decided_by}" if answer.decided_by else ""
        facts.append(_fact("decision", f"{answer.verdict.value}{who} at {answer.decided_at}"))
        if answer.reason:
            facts.append(_fact("reason", answer.reason))
        if answer.answer is not None:
            facts.append(_fact("answer", answer.answer))
    return f'<h3>Ask</h3><dl class="facts ask">{"".join(facts)}</dl>'


def _pending_card(
    folds: _Folds,
    pending: PendingStep,
    results: Mapping[str, ModelCallResult],
    finished: bool,
) -> tuple[str, str]:
    """(list item, card) of the step announced and never completed."""
    k = pending.step
    if pending.tool_name is not None:
        bold, preview = pending.tool_name, _preview(pending.arguments or "")
    elif pending.action is not None:
        bold, preview = "code", _preview(pending.action)
    else:
        bold, preview = "unfinished", ""
    css = f"pending {pending.kind}"
    item = _list_item(k, css, bold, f"{preview} — {pending.state}" if preview else pending.state)
    body = [
        f'<section class="step {css}" id="step-{k}" tabindex="-1" data-step="{k}">',
        f'<h2><a href="#step-{k}">Step {k}</a> <span class="decision">'
        f"{text(pending.tool_name or 'unfinished step')}</span> "
        f'<span class="state">{text(pending.state)}</span></h2>',
        f'<p class="detail">{text(pending.detail)}</p>',
        '<dl class="facts">',
        *_reply_facts(pending.reply),
        "</dl>",
        "<h3>Reply</h3>",
    ]
    if pending.reply is not None:
        body += _reply_html(folds, pending.reply)
    elif pending.failure is not None:
        body.append(f'<pre class="failure">{text(pending.failure)}</pre>')
    else:
        body.append("<p>no reply recorded.</p>")
    body.append("<h3>Action</h3>")
    body.append(_action_html(folds, pending.tool_name, pending.arguments, pending.action))
    body.append(f'<p class="source">{text("Source: " + pending.source)}</p>')
    if pending.ask is not None:
        body.append(_ask_html(pending.ask, pending.answer))
    body.append(_intent_items(pending.intents, results, None, finished))
    body.append("</section>")
    return item, "".join(body)


def _message_html(folds: _Folds, message: Message, label: str) -> str:
    content = "".join(block.text for block in message.content)
    role = message.role.value
    call = f" · {message.tool_call_id}" if message.tool_call_id else ""
    return (
        f'<li class="message {text(role)}"><span class="role">{text(role)}{text(call)}'
        f"{f' · {text(label)}' if label else ''}</span>"
        f"{folds.block(content, css='message')}</li>"
    )


#: How much of a step's history message is shown (the whole is the reply or observation above).
HISTORY_PREVIEW_CHARS = 300


def _history_message_html(message: Message) -> str:
    """A message a step added to the history: its role, size and beginning, not a second
    copy of a long observation (the whole is shown above, as the step recorded it)."""
    content = "".join(block.text for block in message.content)
    role = message.role.value + (f" · {message.tool_call_id}" if message.tool_call_id else "")
    more = len(content) - HISTORY_PREVIEW_CHARS
    rest = f"… ({more:,} more characters, as above)" if more > 0 else ""
    return (
        f'<li class="message"><span class="role">{text(role)} · {len(content):,} chars</span>'
        f'<pre class="message">{text(content[:HISTORY_PREVIEW_CHARS])}{text(rest)}</pre></li>'
    )


def _task_html(page: RunPage, folds: _Folds) -> str:
    """The goal and the messages sent to the model, or what the log says of them (design 0061)."""
    log = page.log
    started = log.started
    snapshot = started.parameter_snapshot if started else {}
    parts = ['<section class="task" id="task"><h2>Task</h2>']
    if started is not None and started.queued_input is not None:
        parts.append(
            f"<h3>User input of this turn <small>follows run "
            f"<code>{text(started.follows_run_id)}</code></small></h3>"
            + folds.block(started.queued_input, css="message")
        )
    prompt = page.prompt
    if page.prompt_problem is not None:
        parts.append(
            f'<p class="missing">The messages could not be rebuilt with the request of '
            f"<code>{text(page.agent)}</code>: {text(page.prompt_problem)}</p>"
        )
    if prompt is None:
        parts.append(
            '<p class="missing">The log does not record the prompt: the goal and the other '
            "messages the run started from are in its request, which the log does not hold, so "
            "this page cannot show them. <code>polyloop view RUN_ID --agent MODULE:FACTORY</code> "
            "rebuilds them from the agent's request, as resume does. What the log does hold: each "
            "step's reply and observation went back into the messages as below, the observation "
            "wrapped in the template shown here.</p>"
        )
        facts = [
            _fact("tools offered", snapshot.get("request.tools", "not recorded")),
            _fact("tool section", snapshot.get("request.tool_section_template", "not recorded")),
            _fact("observation template", snapshot.get("request.observation_template", "—")),
            _fact("tools sent natively", snapshot.get("request.native_tools", "false")),
        ]
        parts.append(f'<dl class="facts">{"".join(facts)}</dl></section>')
        return "".join(parts)
    goal_start = len(prompt.prefix) - prompt.goal_messages
    goal = prompt.prefix[goal_start:]
    parts.append("<h3>Goal</h3><ol class=messages>")
    parts += [_message_html(folds, message, "goal") for message in goal]
    parts.append("</ol>")
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
        check = (
            f"its size matches the prompt size recorded by each of the {len(recorded):,} steps"
            if recorded
            else "no step recorded a prompt size to compare with"
        )
        css = "rebuilt"
    else:
        check = (
            f"it does NOT match the run: step {mismatch} recorded "
            f"{recorded[mismatch]:,} prompt characters, the rebuilt messages hold "
            f"{prompt.chars_before[mismatch]:,} — this agent's request is not the one the run "
            "was started with, so these messages are not what its model was sent"
        )
        css = "missing"
    parts.append(
        f'<p class="{css}">Rebuilt from the request of <code>{text(page.agent or "--agent")}'
        f"</code> and the log, as resume rebuilds the prompt; {text(check)}. Every call sent "
        f"these {len(prompt.prefix):,} messages first, then each earlier step's reply and "
        "observation (two messages a step).</p>"
    )
    parts.append(
        f'<details class="messages"><summary>The {len(prompt.prefix):,} messages before the '
        "first step's</summary><ol class=messages>"
    )
    for index, message in enumerate(prompt.prefix):
        label = "goal" if index >= goal_start else ""
        parts.append(_message_html(folds, message, label))
    parts.append("</ol></details></section>")
    return "".join(parts)


def run_page(page: RunPage) -> str:
    """The HTML of one run's page."""
    log = page.log
    results = {result.result_id: result for result in log.model_results}
    intents: dict[int, list[Intent]] = {}
    for intent in log.intents:
        intents.setdefault(intent.call_index, []).append(intent)
    steps = [completed.step for completed in log.steps]
    folds = _Folds()
    cards: list[str] = []
    items: list[str] = []
    history = page.prompt.history if page.prompt is not None else ()
    for completed in log.steps:
        step = completed.step
        k = step.step_idx
        own = intents.get(k, [])
        model_intent = next((i for i in own if i.kind is IntentKind.MODEL_CALL), None)
        result = None if model_intent is None else results.get(model_intent.result_id)
        reply = _reply_of(result)
        css, decision = _decision(step, result)
        status = "" if step.action_status is None else step.action_status.value
        replayed = completed.replayed_on_resume
        marks = (
            ""
            if replayed is None
            else f'<span class="mark replay" title="resume made this call again after a crash">'
            f"replayed on resume: {text(_REPLAYED[replayed])}</span>"
        )
        bold, preview = _list_label(step, decision)
        items.append(_list_item(k, css, bold, preview, replayed=replayed is not None))
        body = [
            f'<section class="step {css}" id="step-{k}" tabindex="-1" data-step="{k}">',
            f'<h2><a href="#step-{k}">Step {k}</a> <span class="decision">{text(decision)}</span>'
            f"{f' <span class=status>{text(status)}</span>' if status else ''}{marks}</h2>",
            '<dl class="facts">',
            _fact("parse", "ok" if step.parse_ok else "failed"),
            _fact("prompt chars", f"{step.prompt_chars:,}"),
            _fact("wall", f"{step.step_wall_ms:,} ms"),
            _fact("call id", step.call_id or "—"),
            *_reply_facts(reply),
            "</dl>",
            "<h3>Reply</h3>",
        ]
        if reply is not None:
            body += _reply_html(folds, reply)
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
            body.append(
                _action_html(
                    folds,
                    step.tool_name,
                    step.tool_arguments,
                    step.action if step.tool_name is None else None,
                )
            )
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
        if k < len(history):
            body.append(
                "<details class=messages><summary>as the model saw it in the next call</summary>"
                "<ol class=messages>"
            )
            body += [_history_message_html(message) for message in history[k]]
            body.append("</ol></details>")
        if own:
            body.append(_intent_items(own, results, completed, log.finished is not None))
        body.append("</section>")
        cards.append("".join(body))
    pending = pending_step(log, page.parser, page.agent) if page.damage is None else None
    if pending is not None:
        item, card = _pending_card(folds, pending, results, log.finished is not None)
        items.append(item)
        cards.append(card)
    heading, why = _why(page)
    snapshot = log.started.parameter_snapshot if log.started else {}
    final_answer = None if log.finished is None else log.finished.result.final_answer
    summary = [
        _fact("stop reason", heading),
        _fact("why", why),
    ]
    if page.damage is None and log.started is not None:
        summary.append(_fact("status word", run_status(log).value))
    if log.started is not None:
        started_at = log.started.started_at
        summary.append(_fact("started", started_at or "— (the log predates start times)"))
    summary.append(_fact("steps", f"{len(steps):,}"))
    if pending is not None:
        summary.append(_fact(f"step {pending.step}", pending.state))
    usage = run_usage(log)
    tokens = run_tokens(log)
    if tokens is not None:
        summary.append(_fact("tokens", f"{tokens:,} ({_usage_text(usage)})"))
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
    task = _task_html(page, folds) if log.started is not None else ""
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
            f'<details id="parameters" aria-label="parameter snapshot"><summary>Parameter '
            f"snapshot ({len(snapshot):,} keys)</summary><table>{parameters}</table></details>"
            f"</section>{task}{''.join(cards)}</main>"
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


def _cell(value: object, sort: object, css: str = "") -> str:
    """A cell with its sort key (``data-sort``): numbers sort as numbers, text as text."""
    return f'<td class="{css}" data-sort="{text(sort)}">{text(value)}</td>'


def _started_cell(started_at: str | None) -> str:
    """The start time as recorded, sorting by the instant it names (text would sort offsets
    other than UTC out of order); "—", sorting first, for a log that has none."""
    if started_at is None:
        return _cell("—", -1, "muted")
    try:
        instant = datetime.datetime.fromisoformat(started_at)
    except ValueError:
        return _cell(started_at, -1)
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=datetime.UTC)
    return _cell(started_at, int(instant.timestamp()))


def index_page(store: str, entries: Iterable[RunEntry], unreadable: Sequence[str] = ()) -> str:
    """The HTML of the store-wide list: one row per run, filterable, sortable by each column
    (click a heading), each linking to its page."""
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
            f'<tr data-ending="{text(ending)}"><td data-sort="{text(entry.run_id)}">{name}</td>'
            + _started_cell(entry.started_at)
            + _cell(
                "" if entry.wall_ms is None else _duration(entry.wall_ms),
                -1 if entry.wall_ms is None else entry.wall_ms,
                "num",
            )
            + _cell(entry.run_status or "", entry.run_status or "")
            + _cell(entry.status, entry.status)
            + _cell(entry.stop_reason or "", entry.stop_reason or "")
            + _cell(
                "" if entry.steps is None else entry.steps,
                -1 if entry.steps is None else entry.steps,
                "num",
            )
            + _cell(
                "" if entry.tokens is None else f"{entry.tokens:,}",
                -1 if entry.tokens is None else entry.tokens,
                "num",
            )
            + _cell(entry.model, entry.model)
            + _cell(entry.task, entry.task, "task")
            + "</tr>"
        )
    options = "".join(f'<option value="{text(r)}">{text(r)}</option>' for r in sorted(reasons))
    problems = "".join(f"<li>{text(line)}</li>" for line in unreadable)
    damage = (
        f'<div class="damage" role="alert"><b>Could not be read:</b><ul>{problems}</ul></div>'
        if problems
        else ""
    )
    headings = "".join(
        f'<th data-kind="{kind}" title="{text(title)}">'
        f'<button type="button">{text(name)}</button></th>'
        for name, kind, title in (
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
    )
    return _document(
        title=f"PolyLoop runs in {store}",
        body=(
            f"<header><div><h1>Runs</h1><p class=store>{text(store)}</p></div>"
            '<p class="keys">keys: <kbd>/</kbd> filter, <kbd>j</kbd>/<kbd>k</kbd> move, '
            "<kbd>Enter</kbd> open; click a heading to sort</p></header>"
            f"{damage}"
            '<main class="index"><p class="filters"><input id="filter" type="search" '
            'placeholder="filter: run id, model, stop reason…" aria-label="filter">'
            f'<select id="ending" aria-label="stop reason"><option value="">every ending</option>'
            f"{options}</select> <span id=count></span></p>"
            f'<table id="runs"><thead><tr>{headings}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></main>"
        ),
        script=INDEX_SCRIPT,
    )


def _usages(log: RunLog) -> list[Mapping[str, int]]:
    return [r.reply.usage for r in log.model_results if r.reply is not None and r.reply.usage]


def run_tokens(log: RunLog) -> int | None:
    """The run's tokens: :func:`tokens_of` each recorded reply, summed — every reply, that of a
    step not completed too (its tokens were spent). The one rule of both pages (design 0061).
    ``None``: no reply reported usage."""
    usages = _usages(log)
    if not usages:
        return None
    return sum(tokens_of(usage) for usage in usages)


def run_usage(log: RunLog) -> dict[str, int]:
    """Each usage key summed over the same replies as :func:`run_tokens`."""
    totals: dict[str, int] = {}
    for usage in _usages(log):
        for key, count in usage.items():
            totals[key] = totals.get(key, 0) + count
    return totals
