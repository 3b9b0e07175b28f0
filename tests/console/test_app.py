"""The console over real HTTP: a real ``polyloop serve`` on a loopback port, driven by httpx.

Sign-in and what no credential gets; the token made at the first start (0600, printed once);
the CSRF token and the same-origin check on every state-changing POST (a forged cross-site
POST writes nothing); the Content-Security-Policy; hostile arguments shown as text; a decision
that lost the race says who decided and what the run waits on now; the runs page's filter,
search and paging.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from polyloop.asking import Verdict
from polyloop.recovery import pending_ask
from polyloop.stores.sqlite import SqliteRunStore
from polyloop_console.app import CSP, PAGE_SIZE
from tests.console._agents import HOSTILE_QUESTION, ONE_REFUND, TWO_REFUNDS
from tests.console._kit import (
    Served,
    csrf_of,
    ledger_lines,
    park,
    serve,
    signed_in,
)

pytestmark = pytest.mark.slow


async def _log(store: Path, run_id: str):  # type: ignore[no-untyped-def]
    async with SqliteRunStore(store) as opened:
        return await opened.read_log(run_id)


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "home" / "runs.sqlite"
    path.parent.mkdir(parents=True)
    asyncio.run(park(path, "r-two", tmp_path / "ledger", TWO_REFUNDS))
    asyncio.run(
        park(
            path,
            "r-hostile",
            tmp_path / "ledger",
            ['CALL ask_user {"question": ' + json.dumps(HOSTILE_QUESTION) + "}", "CALL submit {}"],
        )
    )
    return path


@pytest.fixture
def served(tmp_path: Path, store: Path) -> Iterator[Served]:
    running = serve(tmp_path / "home", store)
    yield running
    running.stop()


def _form(page: str, run_id: str, verdict: str) -> dict[str, str]:
    """The fields of ``run_id``'s form for ``verdict`` as the inbox page holds them."""
    import re

    section = page.split(f'data-run="{run_id}"', 1)[1].split("</section>", 1)[0]
    step = re.search(r'name="step" value="(\d+)"', section)
    digest = re.search(r'name="arguments_sha256" value="([0-9a-f]+)"', section)
    assert step is not None
    assert digest is not None
    return {
        "csrf": csrf_of(page),
        "run_id": run_id,
        "step": step.group(1),
        "arguments_sha256": digest.group(1),
        "verdict": verdict,
    }


def test_without_a_credential_nothing_is_shown_or_decided(served: Served, store: Path) -> None:
    with httpx.Client(base_url=served.base, headers={"Origin": served.base}) as anonymous:
        _anonymous(anonymous, served)
    log = asyncio.run(_log(store, "r-two"))
    assert [] == list(log.answers)
    assert "sign-in refused" in served.audit()


def _anonymous(anonymous: httpx.Client, served: Served) -> None:
    for path in ("/", "/runs", "/runs/r-two"):
        answer = anonymous.get(path)
        assert 303 == answer.status_code, path
        assert "/login" == answer.headers["location"], path
    refused = anonymous.post(
        "/decide",
        data={"run_id": "r-two", "step": "0", "verdict": "approve", "arguments_sha256": "0" * 64},
    )
    assert 403 == refused.status_code
    wrong = anonymous.post("/login", data={"token": "not-the-token-at-all"})
    assert 403 == wrong.status_code
    assert "not known" in wrong.text
    assert "set-cookie" not in wrong.headers


def test_the_first_start_token_is_private_and_printed_once(
    tmp_path: Path, served: Served, store: Path
) -> None:
    token_file = store.parent / "console-token"
    assert served.token is not None
    assert served.token == token_file.read_text().strip()
    assert 0o600 == stat.S_IMODE(os.stat(token_file).st_mode)
    served.stop()
    again = serve(tmp_path / "home", store, name="again")
    try:
        assert again.token is None
        assert served.token not in again.stdout.read_text()
        with signed_in(again, served.token) as client:
            assert "r-two" in client.get("/").text
    finally:
        again.stop()
    # No token in the audit log.
    assert served.token not in served.audit() + again.audit()


def test_session_cookie_and_security_headers(served: Served) -> None:
    with httpx.Client(base_url=served.base, headers={"Origin": served.base}) as client:
        _headers(client, served)


def _headers(client: httpx.Client, served: Served) -> None:
    answer = client.post("/login", data={"token": served.token})
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie
    for path in ("/", "/runs", "/login", "/static/console.css"):
        page = client.get(path)
        assert 200 == page.status_code, path
        assert CSP == page.headers["content-security-policy"], path
        assert "nosniff" == page.headers["x-content-type-options"]
        assert "DENY" == page.headers["x-frame-options"]
    # The console's own pages hold no script at all.
    assert "<script" not in client.get("/").text.replace("&lt;script", "")
    # The viewer's page allows only its own scripts, by digest.
    run = client.get("/runs/r-two")
    assert 200 == run.status_code
    policy = run.headers["content-security-policy"]
    assert "'sha256-" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]


def test_a_forged_cross_site_post_is_refused_and_writes_nothing(
    served: Served, store: Path
) -> None:
    with signed_in(served) as client:
        fields = _form(client.get("/").text, "r-two", "approve")
        evil = {"Origin": "http://evil.example"}
        assert 403 == client.post("/decide", data=fields, headers=evil).status_code
        # No Origin and a foreign Referer: refused too; neither at all: refused.
        foreign = {"Origin": "", "Referer": "http://evil.example/page"}
        client.headers.pop("Origin")
        assert 403 == client.post("/decide", data=fields, headers=foreign).status_code
        assert 403 == client.post("/decide", data=fields).status_code
        client.headers["Origin"] = served.base
        # Same origin without the session's CSRF token, or another session's: refused.
        assert 403 == client.post("/decide", data={**fields, "csrf": ""}).status_code
        with signed_in(served) as other:
            stranger = csrf_of(other.get("/").text)
        assert 403 == client.post("/decide", data={**fields, "csrf": stranger}).status_code
        # A sign-in posted from another site is refused.
        login = httpx.post(f"{served.base}/login", data={"token": served.token}, headers=evil)
        assert 403 == login.status_code
        assert [] == list(asyncio.run(_log(store, "r-two")).answers)
        # The real form is taken, by the signed-in person.
        assert 303 == client.post("/decide", data=fields).status_code
    answers = asyncio.run(_log(store, "r-two")).answers
    assert [(Verdict.APPROVE, "operator")] == [(a.verdict, a.decided_by) for a in answers]
    assert "refused cross-origin POST" in served.audit()
    assert "decided person='operator' run_id='r-two' step=0 verdict=approve" in served.audit()


def test_hostile_arguments_are_shown_as_text(served: Served, store: Path) -> None:
    with signed_in(served) as client:
        page = client.get("/").text
        assert "<script>alert" not in page
        assert "<img src=x" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=" in page
        # The answer goes in as text, and is recorded as typed.
        fields = _form(page, "r-hostile", "answer")
        typed = "<b>yes</b> \x1b[1m"
        assert 303 == client.post("/decide", data={**fields, "answer": typed}).status_code
    answered = asyncio.run(_log(store, "r-hostile")).answers[0]
    assert typed == answered.answer


def test_a_decision_that_lost_the_race_says_who_decided_and_what_changed(
    tmp_path: Path, served: Served, store: Path
) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"alice": "a" * 20, "bob": "b" * 20}))
    served.stop()
    both = serve(tmp_path / "home", store, "--tokens", str(tokens), name="both")
    try:
        with signed_in(both, "a" * 20) as alice, signed_in(both, "b" * 20) as bob:
            seen_by_bob = _form(bob.get("/").text, "r-two", "approve")
            assert (
                303
                == alice.post(
                    "/decide", data=_form(alice.get("/").text, "r-two", "approve")
                ).status_code
            )
            # Bob's page was left open: his approval of the same ask is not taken.
            after = bob.post("/decide", data=seen_by_bob, follow_redirects=True).text
            assert "Not taken, nothing was written" in after
            assert "already decided: approve by alice" in after
            # Bob cannot reject with an empty reason either (refused, nothing written).
        log = asyncio.run(_log(store, "r-two"))
        assert [("alice", 0)] == [(a.decided_by, a.step) for a in log.answers]
        assert pending_ask(log) is None
    finally:
        both.stop()


def test_edits_need_the_agent_and_are_checked_against_the_schema(
    tmp_path: Path, store: Path
) -> None:
    ledger = tmp_path / "ledger"
    options = ("--agent", "tests.console._agents:agent", "--episode")
    from tests.console._kit import episode

    running = serve(tmp_path / "home", store, *options, episode(ledger, TWO_REFUNDS))
    try:
        with signed_in(running) as client:
            fields = _form(client.get("/").text, "r-two", "edit")
            bad = client.post(
                "/decide", data={**fields, "arguments": '{"amount": -5}'}, follow_redirects=True
            )
            assert "does not fit the ask; nothing was written" in bad.text
            assert [] == list(asyncio.run(_log(store, "r-two")).answers)
            good = client.post("/decide", data={**fields, "arguments": '{"amount": 30}'})
            assert 303 == good.status_code
        answers = asyncio.run(_log(store, "r-two")).answers
        assert [Verdict.EDIT] == [a.verdict for a in answers]
        # The run went on by itself: the edited refund ran, then it parked on step 1.
        from tests.console._kit import wait_for

        wait_for(lambda: "refund:30" in ledger_lines(ledger), "the edited refund")
        wait_for(
            lambda: (
                (p := pending_ask(asyncio.run(_log(store, "r-two")))) is not None and p.step == 1
            ),
            "the run to park on step 1",
        )
        assert ["refund:30"] == ledger_lines(ledger)
    finally:
        running.stop()


def test_runs_page_filters_searches_and_pages(tmp_path: Path, store: Path) -> None:
    async def many() -> None:
        for index in range(PAGE_SIZE + 5):
            await park(store, f"bulk-{index:03d}", tmp_path / "ledger", ONE_REFUND)

    asyncio.run(many())
    running = serve(tmp_path / "home", store)
    try:
        with signed_in(running) as client:
            first = client.get("/runs").text
            assert first.count("<tr><td>") == PAGE_SIZE
            assert 'id="next"' in first
            following = client.get("/runs", params={"after": "bulk-049"}).text
            assert "bulk-050" in following
            assert "bulk-049" not in following
            assert "r-two" in following
            assert 'id="next"' not in following
            searched = client.get("/runs", params={"q": "hostile"}).text
            assert searched.count("<tr><td>") == 1
            assert "r-hostile" in searched
            waiting = client.get("/runs", params={"status": "finished"}).text
            assert "No run matches." in waiting
    finally:
        running.stop()


def test_a_host_name_rebound_to_loopback_reaches_nothing(served: Served) -> None:
    """DNS rebinding: another site's name pointed at 127.0.0.1 is refused by its Host."""
    with signed_in(served) as client:
        rebound = client.get("/", headers={"Host": "evil.example"})
        assert 400 == rebound.status_code
        assert "Waiting for a person" not in rebound.text
        assert 200 == client.get("/", headers={"Host": "localhost"}).status_code


def test_a_rejection_needs_a_reason_and_records_the_person(served: Served, store: Path) -> None:
    with signed_in(served) as client:
        fields = _form(client.get("/").text, "r-two", "reject")
        empty = client.post("/decide", data={**fields, "reason": "  "}, follow_redirects=True)
        assert "does not fit the ask; nothing was written" in empty.text
        assert [] == list(asyncio.run(_log(store, "r-two")).answers)
        taken = client.post("/decide", data={**fields, "reason": "<b>too much</b>"})
        assert 303 == taken.status_code
        shown = client.get("/").text
        assert "Recorded: reject of run r-two, step 0, by operator." in shown
    answers = asyncio.run(_log(store, "r-two")).answers
    assert [(Verdict.REJECT, "<b>too much</b>", "operator")] == [
        (a.verdict, a.reason, a.decided_by) for a in answers
    ]


def test_the_inbox_shows_what_a_person_decides(served: Served, store: Path) -> None:
    """Run, step, kind, tool, the exact arguments and their digest, since when, the tool's
    replay policy; a question's text; and the forms post the ask's step."""
    log = asyncio.run(_log(store, "r-two"))
    ask = log.asks[0]
    with signed_in(served) as client:
        page = client.get("/").text
    section = page.split('data-run="r-two"', 1)[1].split("</section>", 1)[0]
    assert "step 0 · approval of <code>refund</code>" in section
    assert f"<dd>{ask.asked_at}</dd>" in section
    assert "<dt>replay policy</dt><dd>never</dd>" in section
    assert f"sha256 {ask.arguments_sha256[:12]}" in section
    assert "&#34;amount&#34;: 80" in section
    # Approve and reject (editing needs --agent, and says so).
    assert section.count('name="step" value="0"') == 2
    assert "start the console with <code>--agent</code>" in section
    question = page.split('data-run="r-hostile"', 1)[1].split("</section>", 1)[0]
    assert 'class="question"' in question
    assert 'name="answer"' in question
