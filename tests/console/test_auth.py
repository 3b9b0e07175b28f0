"""Who may sign in and which POSTs are taken, as pure decisions (design 0068): the token
lookup, the token made at the first start, and the same-origin rule, with hypothesis."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from polyloop_console.app import same_origin
from polyloop_console.auth import DEFAULT_PERSON, TokenError, Tokens, first_start_token

TOKEN = st.text(min_size=16, max_size=40).filter(lambda text: text == text.strip())


@given(st.dictionaries(TOKEN, st.sampled_from(["alice", "bob", "carol"]), min_size=1), st.text())
def test_a_token_signs_in_as_its_person_and_nothing_else_does(
    by_token: dict[str, str], offered: str
) -> None:
    tokens = Tokens(by_token)
    for token, person in by_token.items():
        assert person == tokens.person(token)
        assert person == tokens.person(f" {token}\n")
    assert by_token.get(offered.strip()) == tokens.person(offered)


def test_the_first_start_token_is_made_once_and_kept_private(tmp_path: Path) -> None:
    tokens, made = first_start_token(tmp_path)
    assert made is not None
    assert len(made) >= 40
    assert DEFAULT_PERSON == tokens.person(made)
    assert 0o600 == stat.S_IMODE(os.stat(tmp_path / "console-token").st_mode)
    again, none = first_start_token(tmp_path)
    assert none is None
    assert DEFAULT_PERSON == again.person(made)
    assert "'" + made not in repr(again)
    os.chmod(tmp_path / "console-token", 0o644)
    with pytest.raises(TokenError, match="chmod 600"):
        first_start_token(tmp_path)


def _request(host: str, headers: dict[str, str]) -> Request:
    raw = [(b"host", host.encode())] + [(k.encode(), v.encode()) for k, v in headers.items()]
    return Request(
        {"type": "http", "scheme": "http", "method": "POST", "headers": raw, "path": "/"}
    )


ORIGINS = st.from_regex(r"\A(https?)://[a-z0-9.\-\[\]:]{1,30}(:[0-9]{1,5})?\Z")


@given(ORIGINS)
def test_only_the_consoles_own_origin_is_taken(origin: str) -> None:
    own = "http://127.0.0.1:8765"
    by_origin = same_origin(_request("127.0.0.1:8765", {"origin": origin}))
    assert (origin == own) == by_origin
    by_referer = same_origin(_request("127.0.0.1:8765", {"referer": origin + "/page"}))
    assert (origin == own) == by_referer
    # An Origin that is not ours is not rescued by a Referer that is.
    assert not same_origin(
        _request("127.0.0.1:8765", {"origin": origin + "x", "referer": own + "/"})
    )


def test_a_post_naming_no_origin_at_all_is_refused() -> None:
    assert not same_origin(_request("127.0.0.1:8765", {}))
    assert same_origin(_request("127.0.0.1:8765", {"origin": "http://127.0.0.1:8765"}))
