"""Keeping the client's secrets out of every text it produces.

A gateway may echo the request (headers, URL) into an error body, and a transport error may
quote the URL; such text would reach ``GatewayError`` and from there the run log. The client
therefore passes every text it produces through one :class:`Redactor`.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote, unquote, urlsplit, urlunsplit

__all__ = ["REDACTED", "PublicUrl", "Redactor", "split_userinfo"]

#: What a secret is replaced with.
REDACTED: Final = "[redacted]"

#: Extra-header values shorter than this are not treated as secrets: no credential is that
#: short, and replacing, say, every "1" would garble the text (status codes included).
MIN_HEADER_SECRET_CHARS: Final = 6


@dataclass(frozen=True, slots=True)
class PublicUrl:
    """A URL split into what may be shown (``url``, without userinfo) and its userinfo."""

    url: str
    username: str
    password: str


def split_userinfo(url: str) -> PublicUrl:
    """``url`` without ``user:password@``, and the (percent-decoded) user and password."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return PublicUrl(url, "", "")
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    return PublicUrl(urlunsplit(parts._replace(netloc=host)), unquote(user), unquote(password))


def _forms(secret: str) -> set[str]:
    """The ways a secret may be written back by a server: as is, JSON-escaped, URL-encoded."""
    return {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]} | {
        quote(secret, safe=""),
        quote(secret),
    }


class Redactor:
    """Replaces each given secret (and its escaped forms) by ``[redacted]`` in a text."""

    __slots__ = ("_pattern",)

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = {form for secret in secrets if secret for form in _forms(secret)}
        # Longest first, so a secret containing another is replaced whole.
        ordered = sorted(forms, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    @classmethod
    def for_client(
        cls, *, api_key: str | None, headers: Mapping[str, str], url: PublicUrl
    ) -> Redactor:
        """The secrets of one client: its key, its extra headers' values, its URL's userinfo
        (and the Basic credentials httpx derives from it)."""
        secrets = [api_key or ""]
        secrets += [value for value in headers.values() if len(value) >= MIN_HEADER_SECRET_CHARS]
        if url.username or url.password:
            secrets += [url.password]
            if len(url.username) >= MIN_HEADER_SECRET_CHARS:
                secrets.append(url.username)
            basic = f"{url.username}:{url.password}".encode()
            secrets.append(base64.b64encode(basic).decode("ascii"))
        return cls(secrets)

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)
