"""The console's web app (Starlette): sign-in, the inbox of pending asks, deciding, the runs.

Every page needs a signed-in session; every state-changing POST needs the session's CSRF token
and a same-origin ``Origin`` (or ``Referer``); every response carries a Content-Security-Policy
that runs no inline script (design 0068). Values shown are escaped by Jinja's autoescape.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from polyloop.asking import AskKind, UserAsked
from polyloop.errors import (
    AskNotPendingError,
    ConfigurationError,
    PolyLoopError,
    RunLeaseHeldError,
    StaleAskError,
)
from polyloop.listing import (
    OVERVIEW_STATUSES,
    OverviewQuery,
    RunOverview,
    overview_of,
    select_overviews,
    select_pending,
    supports_run_overviews,
)
from polyloop.ports import RunLog, RunStore
from polyloop.recovery import answer_to, pending_ask
from polyloop.session import answer, approve, edit, reject
from polyloop.tools import ToolRegistry
from polyloop_cli.rendering.redaction import scrub
from polyloop_cli.shared.agents import opened_agent
from polyloop_cli.shared.errors import CliError
from polyloop_cli.shared.stores import StoreUrl, list_run_ids, read_run
from polyloop_console.auth import Session, Sessions, Tokens
from polyloop_console.driving import Agent, resume_one
from polyloop_console.live import RunWatch, change_marker
from polyloop_console.viewer.lineage import ComparePage, read_lineage
from polyloop_console.viewer.pages import RunPage, compare_page, run_page

__all__ = ["CSP", "Console", "build_app"]

LOG = logging.getLogger("polyloop.console")
HERE = Path(__file__).resolve().parent
COOKIE = "polyloop_session"
#: The console's pages run no script at all; style comes from /static only.
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
#: Rows of the runs page, and asks of an inbox page.
PAGE_SIZE = 50
#: The status words the runs page filters by: ``polyloop runs``'s ``status`` of a run, as the
#: console shows it without looking at leases (``running`` needs the lease's holder).
STATUSES = OVERVIEW_STATUSES


@dataclass(slots=True)
class Console:
    """What the app serves: one open store, who may sign in, and the agent to resume with."""

    store: RunStore
    url: StoreUrl
    tokens: Tokens
    agent: Agent | None = None
    sessions: Sessions = field(default_factory=Sessions)
    #: The background resumes started after decisions (kept so they are not collected).
    resumes: set[asyncio.Task[str]] = field(default_factory=set)
    #: Messages for a session's next page, by session id (post/redirect/get).
    notices: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    #: What tells the live run pages that their run changed (design 0069).
    live: RunWatch | None = None

    def __post_init__(self) -> None:
        if self.live is None:
            self.live = RunWatch(self.store)


def _environment() -> Environment:
    environment = Environment(
        loader=FileSystemLoader(HERE / "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    return environment


_JINJA = _environment()


def _page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_JINJA.get_template(name).render(**context), status_code=status)


class SecurityHeaders:
    """Adds the CSP (unless the response set its own) and the other hardening headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {name.lower() for name, _ in headers}
                defaults = {
                    b"content-security-policy": CSP.encode(),
                    b"x-content-type-options": b"nosniff",
                    b"x-frame-options": b"DENY",
                    b"referrer-policy": b"same-origin",
                    b"cache-control": b"no-store",
                }
                headers += [(k, v) for k, v in defaults.items() if k not in names]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, sending)


def _origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}"


def same_origin(request: Request) -> bool:
    """The request comes from a page of this console: ``Origin``, else ``Referer``, names it."""
    own = _origin(request)
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == own
    referer = request.headers.get("referer")
    if referer is None:
        return False
    try:
        parts = urlsplit(referer)
    except ValueError:
        return False  # not a URL (e.g. a lone bracket): not ours
    return f"{parts.scheme}://{parts.netloc}" == own


def _refused(why: str) -> PlainTextResponse:
    return PlainTextResponse(f"Refused: {why}\n", status_code=403)


Handler = Callable[[Request, "Console", Session, str], Awaitable[Response]]


def _signed_in(console: Console, handler: Handler, *, changes: bool = False) -> Any:
    """``handler`` for a signed-in session only; ``changes``: a state-changing POST, which
    also needs the same origin and the session's CSRF token."""

    async def endpoint(request: Request) -> Response:
        session_id = request.cookies.get(COOKIE)
        session = console.sessions.get(session_id)
        if session is None or session_id is None:
            if request.method == "GET":
                return RedirectResponse("/login", status_code=303)
            return _refused("sign in first.")
        if changes:
            if not same_origin(request):
                LOG.warning(
                    "refused cross-origin POST path=%s person=%r", request.url.path, session.person
                )
                return _refused("the form was not posted from this console (Origin/Referer).")
            form = await request.form()
            if not _same_secret(str(form.get("csrf", "")), session.csrf):
                LOG.warning(
                    "refused POST without CSRF token path=%s person=%r",
                    request.url.path,
                    session.person,
                )
                return _refused("the form's CSRF token is missing or stale; reload the page.")
        return await handler(request, console, session, session_id)

    return endpoint


def _same_secret(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


# ---------------------------------------------------------------------------
# sign-in
# ---------------------------------------------------------------------------


def _login_page(console: Console, message: str = "", status: int = 200) -> HTMLResponse:
    return _page("login.html", status, message=message, store=str(console.url))


async def _login(request: Request, console: Console) -> Response:
    if request.method == "GET":
        return _login_page(console)
    if not same_origin(request):
        LOG.warning("refused cross-origin sign-in")
        return _refused("the sign-in form was not posted from this console (Origin/Referer).")
    form = await request.form()
    person = console.tokens.person(str(form.get("token", "")))
    if person is None:
        LOG.warning(
            "sign-in refused: unknown token from %s", request.client.host if request.client else "?"
        )
        return _login_page(console, "That token is not known; nothing was signed in.", 403)
    session_id, _ = console.sessions.open(person)
    LOG.info("signed in person=%r", person)
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(COOKIE, session_id, httponly=True, samesite="strict", path="/")
    return response


async def _logout(
    request: Request, console: Console, session: Session, session_id: str
) -> Response:
    console.sessions.close(session_id)
    console.notices.pop(session_id, None)
    LOG.info("signed out person=%r", session.person)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE, path="/")
    return response


# ---------------------------------------------------------------------------
# the inbox
# ---------------------------------------------------------------------------


def _pretty(arguments_json: str | None) -> str:
    if arguments_json is None:
        return ""
    try:
        return json.dumps(json.loads(arguments_json), indent=2, sort_keys=True, ensure_ascii=False)
    except ValueError:
        return arguments_json


def ask_view(ask: UserAsked, log: RunLog) -> dict[str, Any]:
    """What the inbox shows of a pending ask."""
    snapshot: Mapping[str, str] = log.started.parameter_snapshot if log.started else {}
    tool = ask.tool_name
    return {
        "run_id": ask.run_id,
        "step": ask.step,
        "kind": ask.kind.value,
        "is_question": ask.kind is AskKind.QUESTION,
        "tool": tool or "(no tool)",
        "action": ask.action,
        "arguments": _pretty(ask.arguments_json),
        "arguments_sha256": ask.arguments_sha256,
        "question": ask.question,
        "asked_at": ask.asked_at,
        "policy": ask.policy_name,
        "replay_policy": snapshot.get(f"request.tools.{tool}.replay_policy", "—") if tool else "—",
    }


async def _every_overview(console: Console) -> list[RunOverview]:
    """Every run's overview by reading every log: for a store without ``RunOverviews``."""
    listing = await list_run_ids(console.store, console.url)
    found = []
    for run_id in listing.run_ids:
        read = await read_run(console.store, console.url, run_id)
        found.append(overview_of(run_id, read.log, read.damage))
    return found


@dataclass(frozen=True, slots=True)
class InboxPage:
    """One page of the inbox: its asks, how many wait in all, and the key of the next page."""

    asks: list[dict[str, Any]]
    total: int
    next_after: tuple[str, str] | None


async def pending_asks(console: Console, after: tuple[str, str] | None = None) -> InboxPage:
    """The asks of one inbox page (oldest first, after ``after``, an ``(asked_at, run_id)``
    key), from the store's index of run overviews when it has one (design 0070)."""
    store = console.store
    if supports_run_overviews(store):
        waiting = await store.pending_asks(after, PAGE_SIZE + 1)
        total: int = await store.count_pending_asks()
    else:
        every = await _every_overview(console)
        waiting = select_pending(every, after, PAGE_SIZE + 1)
        total = sum(1 for each in every if each.status == "waiting_approval")
    more = len(waiting) > PAGE_SIZE
    waiting = waiting[:PAGE_SIZE]
    found = []
    for overview in waiting:
        # The page shows exactly what a decision would run: the ask as its log has it now.
        read = await read_run(store, console.url, overview.run_id)
        ask = None if read.damage is not None else pending_ask(read.log)
        if ask is not None:
            found.append(ask_view(ask, read.log))
    last = waiting[-1] if waiting else None
    next_after = (last.asked_at or "", last.run_id) if more and last is not None else None
    return InboxPage(found, total, next_after)


async def _inbox(request: Request, console: Console, session: Session, session_id: str) -> Response:
    after_at = request.query_params.get("after_at")
    after_run = request.query_params.get("after_run")
    after = None if after_at is None or after_run is None else (after_at, after_run)
    page = await pending_asks(console, after)
    notices = console.notices.pop(session_id, [])
    return _page(
        "inbox.html",
        asks=page.asks,
        total=page.total,
        next_after=page.next_after,
        paged=after is not None,
        person=session.person,
        csrf=session.csrf,
        notices=notices,
        store=str(console.url),
        can_edit=console.agent is not None,
        resumes=console.agent is not None,
    )


async def _registry(console: Console, run_id: str) -> ToolRegistry:
    """The run's tool registry, from its agent (``--agent``): an edit is checked against it."""
    assert console.agent is not None
    async with opened_agent(
        console.agent.spec, console.agent.episode_json, run_id, console.store
    ) as built:
        return built.request.tools


def _what_changed(log: RunLog, step: int) -> str:
    """Who decided the ask of ``step`` and what the run waits on now, in words."""
    words = []
    named = next((ask for ask in log.asks if ask.step == step), None)
    decision = None if named is None else answer_to(log, named)
    if decision is not None:
        who = decision.decided_by or "someone"
        words.append(
            f"The ask of step {step} was already decided: {decision.verdict.value} by {who} at "
            f"{decision.decided_at}."
        )
    now = pending_ask(log)
    if now is not None:
        words.append(
            f"The run now waits on the ask of step {now.step} ({now.kind.value} of "
            f"{now.tool_name or 'no tool'}, asked at {now.asked_at})."
        )
    elif log.finished is not None:
        words.append(f"The run has finished ({log.finished.result.stop_reason.value}).")
    return " ".join(words)


async def _decide(
    request: Request, console: Console, session: Session, session_id: str
) -> Response:
    form = await request.form()
    run_id = str(form.get("run_id", ""))
    verdict = str(form.get("verdict", ""))
    digest = str(form.get("arguments_sha256", ""))
    try:
        step = int(str(form.get("step", "")))
    except ValueError:
        return PlainTextResponse("Refused: the form names no step.\n", status_code=400)
    person = session.person
    notices = console.notices.setdefault(session_id, [])
    try:
        if verdict == "approve":
            await approve(
                console.store, run_id, step=step, arguments_sha256=digest, decided_by=person
            )
        elif verdict == "reject":
            reason = str(form.get("reason", "")).strip()
            if not reason:
                raise ConfigurationError("A rejection needs a reason, which the model reads.")
            await reject(
                console.store,
                run_id,
                step=step,
                reason=reason,
                arguments_sha256=digest,
                decided_by=person,
            )
        elif verdict == "answer":
            await answer(
                console.store, run_id, str(form.get("answer", "")), step=step, decided_by=person
            )
        elif verdict == "edit":
            if console.agent is None:
                raise ConfigurationError(
                    "Editing needs the run's tool schemas: start the console with --agent."
                )
            try:
                arguments = json.loads(str(form.get("arguments", "")))
            except ValueError as error:
                raise ConfigurationError(f"The edited arguments are not JSON ({error}).") from None
            if not isinstance(arguments, dict):
                raise ConfigurationError("The edited arguments must be a JSON object.")
            tools = await _registry(console, run_id)
            await edit(
                console.store,
                run_id,
                arguments,
                step=step,
                tools=tools,
                arguments_sha256=digest,
                decided_by=person,
            )
        else:
            return PlainTextResponse("Refused: unknown verdict.\n", status_code=400)
    except (StaleAskError, AskNotPendingError) as error:
        log = await console.store.read_log(run_id)
        LOG.info(
            "decision not taken person=%r run_id=%r step=%d verdict=%s: %s",
            person,
            run_id,
            step,
            verdict,
            type(error).__name__,
        )
        notices.append(("stale", f"Not taken, nothing was written. {_what_changed(log, step)}"))
        notices.append(("detail", scrub(" ".join(str(error).split()))))
        return RedirectResponse("/", status_code=303)
    except RunLeaseHeldError:
        notices.append(
            (
                "stale",
                "The run is being driven or decided right now; nothing was written. Try again in a moment.",
            )
        )
        return RedirectResponse("/", status_code=303)
    except (ConfigurationError, CliError) as error:
        text = error.line if isinstance(error, CliError) else str(error)
        notices.append(
            (
                "refused",
                "The decision does not fit the ask; nothing was written. "
                + scrub(" ".join(text.split())),
            )
        )
        return RedirectResponse("/", status_code=303)
    LOG.info("decided person=%r run_id=%r step=%d verdict=%s", person, run_id, step, verdict)
    notices.append(("done", f"Recorded: {verdict} of run {run_id}, step {step}, by {person}."))
    if console.agent is not None:
        task = asyncio.create_task(resume_one(console.store, console.agent, run_id))
        console.resumes.add(task)
        task.add_done_callback(console.resumes.discard)
        notices.append(("done", "The run goes on in the background."))
    return RedirectResponse("/", status_code=303)


# ---------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------


def overview_row(overview: RunOverview) -> dict[str, Any]:
    """What the runs page shows of one run (the columns of ``polyloop runs``)."""
    ask = None
    if overview.ask_step is not None:
        ask = {"step": overview.ask_step, "kind": overview.ask_kind, "tool_name": overview.ask_tool}
    return {
        "run_id": overview.run_id,
        "status": overview.status,
        "run_status": overview.run_status,
        "steps": overview.steps,
        "stop_reason": overview.stop_reason,
        "pending_ask": ask,
        "tail": overview.tail,
        "model": overview.model,
        "started_at": overview.started_at,
        "tools": ", ".join(overview.tools),
    }


async def runs_page_rows(
    console: Console, query: OverviewQuery
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of runs (``query``, at most ``PAGE_SIZE``), from the store's index of run
    overviews when it has one (design 0070), else by reading every log; and the run id to
    continue after, if there are more."""
    ask = OverviewQuery(
        status=query.status,
        tool=query.tool,
        binding=query.binding,
        run_id_contains=query.run_id_contains,
        after=query.after,
        limit=PAGE_SIZE + 1,
    )
    if supports_run_overviews(console.store):
        found = await console.store.run_overviews(ask)
    else:
        found = select_overviews(await _every_overview(console), ask)
    rows = [overview_row(each) for each in found[:PAGE_SIZE]]
    more = len(found) > PAGE_SIZE
    return rows, (rows[-1]["run_id"] if more else None)


async def _runs(request: Request, console: Console, session: Session, session_id: str) -> Response:
    notices: list[tuple[str, str]] = []
    status = request.query_params.get("status", "")
    if status and status not in STATUSES:
        notices.append(
            ("refused", f"No status {status!r}: one of {', '.join(STATUSES)}; showing any status.")
        )
        status = ""
    query = request.query_params.get("q", "")
    tool = request.query_params.get("tool", "")
    binding_text = request.query_params.get("binding", "")
    key, equals, value = binding_text.partition("=")
    binding = (key, value) if equals and key else None
    if binding_text and binding is None:
        notices.append(
            (
                "refused",
                f"The binding filter {binding_text!r} is not KEY=VALUE (e.g. team=red): "
                "not applied.",
            )
        )
    after = request.query_params.get("after") or None
    rows, next_after = await runs_page_rows(
        console,
        OverviewQuery(
            status=status, tool=tool, binding=binding, run_id_contains=query, after=after
        ),
    )
    return _page(
        "runs.html",
        rows=rows,
        statuses=STATUSES,
        chosen=status,
        query=query,
        tool=tool,
        binding=binding_text,
        notices=notices,
        next_after=next_after,
        person=session.person,
        csrf=session.csrf,
        store=str(console.url),
    )


_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def viewer_csp(html: str, *, live: bool = False) -> str:
    """The viewer page's policy: no network, its own inline style, and only the inline
    scripts it was built with, by their digests (a script injected into it would not run).
    ``live``: also the console's own live script and its requests to the console."""
    digests = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"
        for body in _INLINE_SCRIPT.findall(html)
    )
    scripts = " ".join(x for x in ("'self'" if live else "", digests) if x) or "'none'"
    connect = "; connect-src 'self'" if live else ""
    return (
        f"default-src 'none'; style-src 'unsafe-inline'; script-src {scripts}{connect}; "
        "img-src data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    )


def run_href(run_id: str) -> str:
    """A run's page in the console."""
    return f"/runs/{quote(run_id, safe='/')}"


def compare_href(run_id: str) -> str:
    """A fork's page beside its source in the console (design 0071)."""
    return f"/compare/{quote(run_id, safe='/')}"


def _viewer_response(html: str) -> HTMLResponse:
    # The viewer's own meta policy stays; the header adds the scripts' digests.
    return HTMLResponse(html, headers={"content-security-policy": viewer_csp(html)})


#: The viewer's own policy forbids every request; the console's header policy replaces it.
_META_POLICY = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>', re.IGNORECASE)


def live_page(html: str, events: str) -> str:
    """The viewer's page made live: the console's script (``/static/live.js``) in its head,
    told where the run's events are; the page's meta policy left out (the header's holds)."""
    tag = (
        f'<script src="/static/live.js" id="polyloop-live" '
        f'data-events="{escape(events, quote=True)}"></script>'
    )
    html = _META_POLICY.sub("", html, count=1)
    head_end = html.find("</head>")
    if head_end < 0:
        return html  # not a page this script knows: served as it is (still not live)
    return html[:head_end] + tag + html[head_end:]


async def _run(request: Request, console: Console, session: Session, session_id: str) -> Response:
    run_id = request.path_params["run_id"]
    # The marker first: a record landing while the page is built makes the page refresh.
    marker = await change_marker(console.store, run_id)
    read = await read_run(console.store, console.url, run_id)
    if read.log == RunLog() and read.damage is None:
        return PlainTextResponse(f"No run {run_id!r} in this store.\n", status_code=404)
    lineage = None
    if read.damage is None:
        lineage = await read_lineage(console.store, read.log, run_href)
    page = RunPage(
        run_id,
        read.log,
        str(console.url),
        read.damage,
        lineage=lineage,
        compare_href=None if lineage is None or lineage.source is None else compare_href(run_id),
    )
    events = "/live/" + quote(run_id, safe="") + "?" + urlencode({"since": marker})
    html = live_page(run_page(page), events)
    return HTMLResponse(html, headers={"content-security-policy": viewer_csp(html, live=True)})


async def _compare(
    request: Request, console: Console, session: Session, session_id: str
) -> Response:
    run_id = request.path_params["run_id"]
    read = await read_run(console.store, console.url, run_id)
    if read.log == RunLog() and read.damage is None:
        return PlainTextResponse(f"No run {run_id!r} in this store.\n", status_code=404)
    if read.damage is not None:
        return PlainTextResponse(
            f"The log of run {run_id!r} cannot be read whole; its page shows what can be.\n",
            status_code=404,
        )
    lineage = await read_lineage(console.store, read.log, run_href)
    if lineage is None:
        return PlainTextResponse(f"Run {run_id!r} is not a fork.\n", status_code=404)
    if lineage.source is None:
        return PlainTextResponse(
            f"Run {run_id!r} is a fork of {lineage.source_run_id!r}, which is not in this store.\n",
            status_code=404,
        )
    page = ComparePage(
        run_id, read.log, lineage.source, lineage, str(console.url), run_href(run_id), "/runs"
    )
    return _viewer_response(compare_page(page))


#: Seconds between comments on an idle event stream (also when an ended session is noticed).
PING_SECONDS = 15.0
#: At most one event per this many seconds on a stream: each makes the page fetch itself
#: again, and a busy run changes far more often than anyone reads.
EVENT_GAP_SECONDS = 0.25


async def _events(request: Request, console: Console) -> Response:
    """The run's server-sent events: ``changed`` each time records of it land (at most one
    per ``EVENT_GAP_SECONDS``), at once if it changed since the page's marker ``since``.
    Needs a session like every page (refused with 403, not sent to sign in: a script reads
    it); ends when the session does."""
    session_id = request.cookies.get(COOKIE)
    if console.sessions.get(session_id) is None:
        return _refused("sign in first.")
    run_id = request.path_params["run_id"]
    since = request.query_params.get("since", "")
    live = console.live
    assert live is not None

    async def events() -> AsyncIterator[ServerSentEvent]:
        async with live.watching(run_id) as watched:
            seen = watched.version
            # Written between the page's marker and now: told at once.
            if await change_marker(console.store, run_id) != since:
                yield ServerSentEvent(data=str(seen), event="changed")
                await asyncio.sleep(EVENT_GAP_SECONDS)
            while console.sessions.alive(session_id):
                waiting = watched.changed
                if watched.version != seen:
                    seen = watched.version
                    yield ServerSentEvent(data=str(seen), event="changed")
                    await asyncio.sleep(EVENT_GAP_SECONDS)
                    continue
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waiting.wait(), PING_SECONDS)

    return EventSourceResponse(
        events(), ping=int(PING_SECONDS), headers={"cache-control": "no-store"}
    )


async def _favicon(request: Request) -> Response:
    return FileResponse(HERE / "static" / "favicon.svg", media_type="image/svg+xml")


def build_app(console: Console, allowed_hosts: Sequence[str] | None = None) -> ASGIApp:
    """The console's ASGI app over ``console``'s open store. ``allowed_hosts``: the names the
    ``Host`` header may give (others get a 400), so a name rebound to this address by another
    site (DNS rebinding) reaches nothing."""

    async def login(request: Request) -> Response:
        return await _login(request, console)

    async def events(request: Request) -> Response:
        return await _events(request, console)

    async def errors(request: Request, error: Exception) -> Response:
        if isinstance(error, CliError):
            return PlainTextResponse(scrub(error.line) + "\n", status_code=500)
        if isinstance(error, PolyLoopError):
            return PlainTextResponse(scrub(" ".join(str(error).split())) + "\n", status_code=500)
        raise error

    app = Starlette(
        routes=[
            Route("/login", login, methods=["GET", "POST"]),
            Route("/logout", _signed_in(console, _logout, changes=True), methods=["POST"]),
            Route("/", _signed_in(console, _inbox), methods=["GET"]),
            Route("/decide", _signed_in(console, _decide, changes=True), methods=["POST"]),
            Route("/runs", _signed_in(console, _runs), methods=["GET"]),
            Route("/runs/{run_id:path}", _signed_in(console, _run), methods=["GET"]),
            Route("/compare/{run_id:path}", _signed_in(console, _compare), methods=["GET"]),
            Route("/live/{run_id:path}", events, methods=["GET"]),
            # Browsers ask for it on every page, the viewer's too.
            Route("/favicon.ico", _favicon, methods=["GET"]),
            Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
        ],
        exception_handlers={CliError: errors, PolyLoopError: errors},
    )
    if allowed_hosts is not None:
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts))
    return SecurityHeaders(app)
