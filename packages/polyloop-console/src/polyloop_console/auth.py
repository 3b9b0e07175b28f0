"""Who may use the console, and how a browser proves it (design 0068).

A person signs in by posting a token; each token maps to a person's name, which becomes the
``decided_by`` of every decision made in that session. The tokens come from a file the host
writes (``--tokens FILE``: a JSON object ``{"alice": "<token>", …}``) or, by default, from
one token made at the first start and kept beside the store with owner-only permissions.

Sessions live in this process only (a restart signs everyone out): a random session id in an
HttpOnly, SameSite=Strict cookie, and a per-session CSRF token every state-changing form
carries.
"""

from __future__ import annotations

import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "DEFAULT_PERSON",
    "TOKEN_FILE_NAME",
    "Session",
    "Sessions",
    "TokenError",
    "Tokens",
    "first_start_token",
    "tokens_from_file",
]

#: The token file made at the first start, beside the store (or in ``POLYLOOP_HOME``).
TOKEN_FILE_NAME = "console-token"
#: The person the first-start token signs in as.
DEFAULT_PERSON = "operator"
#: A session ends after this long without a request.
SESSION_IDLE_SECONDS = 8 * 3600


class TokenError(Exception):
    """The tokens cannot be read; the message says what to do."""


@dataclass(frozen=True, slots=True)
class Tokens:
    """Person name by token. Never printed (``repr`` hides the tokens)."""

    by_token: dict[str, str] = field(repr=False)

    def person(self, token: str) -> str | None:
        """The person ``token`` signs in as, or ``None``; compared in constant time."""
        found = None
        offered = token.strip().encode("utf-8", "surrogatepass")
        for known, person in self.by_token.items():
            if hmac.compare_digest(known.encode("utf-8"), offered):
                found = person
        return found


def tokens_from_file(path: Path) -> Tokens:
    """``{"person": "token", …}`` from ``path``; each token at least 16 characters."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise TokenError(f"cannot read the tokens file {path} ({error.strerror}).") from None
    except ValueError:
        raise TokenError(
            f'the tokens file {path} is not JSON; write an object {{"alice": "<token>"}}.'
        ) from None
    if not isinstance(data, dict) or not data:
        raise TokenError(f'the tokens file {path} must hold an object {{"alice": "<token>"}}.')
    by_token: dict[str, str] = {}
    for person, token in data.items():
        if not isinstance(token, str) or len(token) < 16 or not str(person).strip():
            raise TokenError(
                f"the tokens file {path}: the token of {person!r} must be a string of at least 16 "
                "characters (e.g. `python -c 'import secrets; print(secrets.token_urlsafe())'`)."
            )
        by_token[token] = str(person)
    return Tokens(by_token)


def first_start_token(directory: Path) -> tuple[Tokens, str | None]:
    """The token kept in ``directory``/console-token, made (mode 0600) when missing. Returns
    the tokens and, only when it was just made, the token to print once."""
    path = directory / TOKEN_FILE_NAME
    made = None
    if not path.exists():
        directory.mkdir(parents=True, exist_ok=True)
        made = secrets.token_urlsafe(32)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(made + "\n")
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise TokenError(
            f"{path} can be read by others (mode {mode:o}); `chmod 600 {path}` or delete it to "
            "make a new token."
        )
    token = path.read_text(encoding="utf-8").strip()
    if len(token) < 16:
        raise TokenError(f"{path} holds no token; delete it to make a new one.")
    return Tokens({token: DEFAULT_PERSON}), made


@dataclass(slots=True)
class Session:
    """A signed-in browser: who, its CSRF token, and when it was last seen."""

    person: str
    csrf: str
    seen: float


class Sessions:
    """The signed-in sessions of this process, by session id."""

    def __init__(self) -> None:
        self._by_id: dict[str, Session] = {}

    def open(self, person: str) -> tuple[str, Session]:
        session_id = secrets.token_urlsafe(32)
        session = Session(person, secrets.token_urlsafe(32), time.monotonic())
        self._by_id[session_id] = session
        return session_id, session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self._by_id.get(session_id)
        now = time.monotonic()
        if session is None or now - session.seen > SESSION_IDLE_SECONDS:
            self._by_id.pop(session_id, None)
            return None
        session.seen = now
        return session

    def alive(self, session_id: str | None) -> bool:
        """Whether the session is open, without counting this as its use: a live page left
        open must not keep its session from ending when idle."""
        session = self._by_id.get(session_id or "")
        return session is not None and time.monotonic() - session.seen <= SESSION_IDLE_SECONDS

    def close(self, session_id: str | None) -> None:
        if session_id:
            self._by_id.pop(session_id, None)
