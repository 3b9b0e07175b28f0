"""No secret leaves the command: every line it prints passes through :func:`scrub`.

A store URL can hold a password (``postgresql://runner:secret@db-1/runs``). The command shows a
URL only in its password-free form (:func:`polyloop.stores.urls.shown_url`), and what it prints
goes through one of two filters on the way out:

- :func:`scrub` (tables, lines, JSON documents: ``render.Output``) removes the secrets of every
  store URL this process parsed (:func:`remember_secrets_of`), as written, percent-decoded and
  JSON-escaped. Nothing else: a step's observation is data and is shown as recorded.
- :func:`scrub_error` (``main._report``: every error line, with the detail a store or driver
  reported) also removes any other URL's password (``scheme://user:password@`` →
  ``scheme://user@``) and the value of a ``password=`` in libpq ``key=value`` text, which a
  click usage error may echo from the command line.

``export`` writes the run's records exactly as stored: it is the analysis format.
"""

from __future__ import annotations

import json
import re

from polyloop.stores.urls import url_secrets

__all__ = ["remember_secrets_of", "scrub", "scrub_error"]

_MASK = "***"
_URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s/@:]*):[^\s/@]*@")
_KEY_VALUE_PASSWORD = re.compile(
    r"(?P<head>\b(?:password|sslpassword)\s*=\s*)(?:'(?:[^'\\]|\\.)*'|[^\s']+)", re.IGNORECASE
)

#: Every text that must not be printed, longest first.
_secrets: list[str] = []


def remember_secrets_of(url: str) -> None:
    """Never print the secrets of ``url`` (a store URL this process will use)."""
    found = set(_secrets)
    for secret in url_secrets(url):
        found.add(secret)
        found.add(json.dumps(secret)[1:-1])  # as it stands inside a JSON string
        found.add(json.dumps(secret, ensure_ascii=False)[1:-1])
    _secrets[:] = sorted(found, key=len, reverse=True)


def scrub(text: str) -> str:
    """``text`` without the secrets of the store URLs this process parsed."""
    for secret in _secrets:
        text = text.replace(secret, _MASK)
    return text


def scrub_error(text: str) -> str:
    """:func:`scrub`, and without any URL password or ``password=`` value either."""
    text = _URL_PASSWORD.sub(r"\g<head>@", scrub(text))
    return _KEY_VALUE_PASSWORD.sub(rf"\g<head>{_MASK}", text)
