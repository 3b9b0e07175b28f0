"""How a rule fails, how a seam call is guarded, and the rules every seam's ``parameters()`` shares.

Every failure is a :class:`ContractViolation` whose message starts with the seam and the rule,
e.g. ``RunStore rule 'prefix durability': ...``, followed by what was expected and what was seen.
"""

from __future__ import annotations

import asyncio
import importlib.machinery
import inspect
import os
import re
import sys
import threading
import time
from collections.abc import Awaitable, Iterator, Mapping
from contextlib import contextmanager
from typing import NoReturn, TypeVar, cast

from hypothesis import Phase

T = TypeVar("T")

#: Seconds a single seam call may take before the rule fails as "did not return".
CALL_TIMEOUT = 30.0

#: Hypothesis' phases for the kit's rules. Not ``explain``: the lines it lists are the kit's
#: own, which tell the implementer nothing (the falsifying steps and their traceback do).
HYPOTHESIS_PHASES = tuple(phase for phase in Phase if phase is not Phase.explain)


class ContractViolation(AssertionError):
    """A seam implementation broke a rule of its contract."""


#: The longest ``repr`` of one value a message shows; a longer one is cut in the middle.
SHOWN_CHARACTERS = 80
#: Any run of this many characters without a space is a value nobody reads in full.
_LONG_TOKEN = re.compile(r"\S{200,}")
#: The longest line of a failure message (the rest is cut, with a note).
_LONGEST_LINE = 2000


def _cut(text: str, limit: int, size: str) -> str:
    keep = max(limit - 24, 8)
    return f"{text[: keep * 3 // 4]}...{text[-(keep // 4) :]} ({size})"


def shown(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """``repr(value)`` for a message, cut in the middle with a length note when it is long.

    A 10 000-character run_id reads ``'rrrr...rrr' (10000 characters)``: the message stays one
    readable line and still says how long the value was.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters"
    return _cut(text, limit, size)


def clipped(text: str, limit: int = 300) -> str:
    """``text`` (not a repr) cut to about ``limit`` characters, with a length note."""
    return text if len(text) <= limit else _cut(text, limit, f"{len(text)} characters")


def _readable(detail: str) -> str:
    """A message whose long values and lines are cut: the last guard for values a rule
    formats without :func:`shown` (an implementation's own error text, a whole record)."""
    detail = _LONG_TOKEN.sub(lambda match: clipped(match.group(0), 120), detail)
    return "\n".join(clipped(line, _LONGEST_LINE) for line in detail.split("\n"))


class Rule:
    """One named rule of one seam; every check and guarded call fails in its name."""

    __slots__ = ("name", "seam")

    def __init__(self, seam: str, name: str) -> None:
        self.seam = seam
        self.name = name

    def fail(self, detail: str) -> NoReturn:
        raise ContractViolation(f"{self.seam} rule '{self.name}': {_readable(detail)}")

    def check(self, condition: bool, detail: str) -> None:
        if not condition:
            self.fail(detail)

    async def call(self, what: str, awaitable: Awaitable[T]) -> T:
        """Await one seam call; an exception or a hang fails this rule, naming the call."""
        try:
            return await asyncio.wait_for(_as_coroutine(awaitable), CALL_TIMEOUT)
        except ContractViolation:
            raise
        except TimeoutError:
            self.fail(f"{what} did not return within {CALL_TIMEOUT:g} s")
        except Exception as error:
            raise ContractViolation(
                f"{self.seam} rule '{self.name}': "
                + _readable(f"{what} raised {type(error).__name__}: {clipped(str(error))}")
            ) from error
        finally:
            # Cancelled before the call even started: close it, or it warns "never awaited".
            if inspect.iscoroutine(awaitable) and (
                inspect.getcoroutinestate(awaitable) == inspect.CORO_CREATED
            ):
                awaitable.close()


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def resolve(value: T | Awaitable[T]) -> T:
    """A fixture's callable may be sync or async: await its result if it is awaitable."""
    if inspect.isawaitable(value):
        return cast(T, await value)
    return value


# ---------------------------------------------------------------------------
# Watching for I/O: audit events raised in the calling thread
# ---------------------------------------------------------------------------

_IO_EVENTS = frozenset(
    {
        "open",
        "os.listdir",
        "os.scandir",
        "os.mkdir",
        "os.remove",
        "os.rename",
        "os.rmdir",
        "os.truncate",
        "os.chmod",
        "os.utime",
        "os.link",
        "os.symlink",
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.fork",
        "subprocess.Popen",
        "shutil.copyfile",
        "socket.connect",
        "socket.bind",
        "socket.getaddrinfo",
        "socket.gethostbyname",
        "socket.sendto",
        "sqlite3.connect",
        "http.client.connect",
        "urllib.Request",
        "time.sleep",
    }
)
_watch = threading.local()
_hook_lock = threading.Lock()
_hook_installed = False


#: File endings the import system reads: a lazy ``import`` inside a method is not the I/O the
#: rules are about (it happens once, and never touches the implementation's backend).
_MODULE_SUFFIXES = (*importlib.machinery.all_suffixes(), ".pyc", ".pth", ".typed")


def _is_import_machinery(event: str, args: tuple[object, ...]) -> bool:
    if not args or not isinstance(args[0], str | bytes | os.PathLike):
        return False
    path = os.fsdecode(args[0])
    if event == "open":
        return path.endswith(_MODULE_SUFFIXES) or "__pycache__" in path
    if event in ("os.listdir", "os.scandir"):
        return any(path == entry or path.startswith(entry + os.sep) for entry in sys.path if entry)
    return False


def _audit(event: str, args: tuple[object, ...]) -> None:
    seen: list[str] | None = getattr(_watch, "seen", None)
    if seen is not None and event in _IO_EVENTS and not _is_import_machinery(event, args):
        text = f"{event}{args!r}"
        seen.append(text if len(text) <= 160 else text[:157] + "...")


@contextmanager
def watching_io() -> Iterator[list[str]]:
    """Collect the I/O audit events (file, socket, process, sleep) raised by this thread."""
    global _hook_installed
    with _hook_lock:
        if not _hook_installed:
            sys.addaudithook(_audit)
            _hook_installed = True
    previous: list[str] | None = getattr(_watch, "seen", None)
    seen: list[str] = []
    _watch.seen = seen
    try:
        yield seen
    finally:
        _watch.seen = previous


# ---------------------------------------------------------------------------
# parameters(): the rules every seam shares
# ---------------------------------------------------------------------------

_SECRET_MARKERS = (
    "password",
    "passwd",
    "secret",
    "api_key",
    "apikey",
    "api-key",
    "access_token",
    "auth_token",
    "bearer",
    "private_key",
)
#: A password in a URL's userinfo: ``scheme://user:password@host``.
_URL_PASSWORD = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:]*:(?P<password>[^\s/@]*)@")
#: A password in a key=value connection string (libpq, ODBC, JDBC, a URL's query string).
_KEYWORD_PASSWORD = re.compile(
    r"(?i)(?:^|[\s;&?,])(?:password|passwd|pwd)\s*=\s*(?P<password>'[^']*'|\"[^\"]*\"|[^\s;&,]*)"
)
#: What a redacted password looks like: stars, or a word in angle brackets, or "redacted".
_MASKED = re.compile(r"(?i)^(?:\*+|x+|<[^>]*>|\[?redacted\]?|\.\.\.)$")


def _password_in(text: str) -> str | None:
    """The kind of password ``text`` carries in clear (URL userinfo, ``password=``), if any."""
    for kind, pattern in (("URL userinfo", _URL_PASSWORD), ("password=", _KEYWORD_PASSWORD)):
        for match in pattern.finditer(text):
            password = match.group("password").strip("'\"")
            if password and not _MASKED.match(password):
                return kind
    return None


#: A single call slower than this is not "cheap" (generous: CI machines are slow).
PARAMETERS_BUDGET_SECONDS = 0.1


def call_parameters(rule: Rule, seam_object: object) -> object:
    parameters = getattr(seam_object, "parameters", None)
    rule.check(callable(parameters), "the object has no parameters() method")
    assert callable(parameters)
    rule.check(
        not inspect.iscoroutinefunction(parameters),
        "parameters() is declared async; it must be a plain method returning a mapping "
        "(the snapshot is taken right after assembly, without awaiting anything)",
    )
    try:
        value: object = parameters()
    except Exception as error:
        rule.fail(f"parameters() raised {type(error).__name__}: {error}")
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        rule.fail("parameters() returned an awaitable; it must return the mapping itself")
    return value


def check_parameters_shape(seam: str, seam_object: object) -> None:
    """parameters() is synchronous and returns a mapping of str to str."""
    rule = Rule(seam, "parameters() is synchronous and str-valued")
    value = call_parameters(rule, seam_object)
    rule.check(
        isinstance(value, Mapping),
        f"parameters() returned {type(value).__name__}, not a mapping of str to str",
    )
    assert isinstance(value, Mapping)
    for key, item in value.items():
        rule.check(
            isinstance(key, str) and isinstance(item, str),
            f"parameters() entry {key!r}: {item!r} is not str to str "
            f"({type(key).__name__} to {type(item).__name__}); convert values to strings "
            "so the parameter snapshot can compare them exactly",
        )


def check_parameters_no_io(seam: str, seam_object: object) -> None:
    """parameters() does no I/O and is cheap."""
    rule = Rule(seam, "parameters() does no I/O")
    with watching_io() as seen:
        call_parameters(rule, seam_object)
    rule.check(
        not seen,
        "parameters() did I/O: " + "; ".join(seen[:3]) + ". Compute the parameters when the "
        "object is built and return them from memory",
    )
    cheap = Rule(seam, "parameters() is cheap")
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        call_parameters(cheap, seam_object)
        best = min(best, time.perf_counter() - start)
    cheap.check(
        best <= PARAMETERS_BUDGET_SECONDS,
        f"parameters() took {best * 1000:.0f} ms at best over 3 calls (budget "
        f"{PARAMETERS_BUDGET_SECONDS * 1000:.0f} ms); it must only return values already in memory",
    )


def check_parameters_stable_no_secrets(seam: str, seam_object: object) -> None:
    """parameters() answers the same twice and holds nothing that looks like a secret."""
    stable = Rule(seam, "parameters() is stable")
    first = call_parameters(stable, seam_object)
    second = call_parameters(stable, seam_object)
    if isinstance(first, Mapping) and isinstance(second, Mapping):
        stable.check(
            dict(first) == dict(second),
            f"two calls in a row returned different parameters ({dict(first)!r} then "
            f"{dict(second)!r}); a resume compares them and would refuse the run",
        )
        secrets = Rule(seam, "parameters() holds no secrets")
        for key, item in first.items():
            lowered = str(key).lower()
            marker = next((m for m in _SECRET_MARKERS if m in lowered), None)
            secrets.check(
                marker is None or not str(item),
                f"parameters() key {key!r} looks like a secret ({marker!r}); snapshots are "
                "stored in every run log, so report which credential is used, never its value",
            )
            text = str(item)
            secrets.check(
                not text.startswith(("Bearer ", "sk-", "ghp_", "xoxb-")),
                f"parameters() value of {key!r} looks like a credential; never put secrets "
                "into parameters",
            )
            kind = _password_in(text)
            secrets.check(
                kind is None,
                f"parameters() value of {key!r} carries a password ({kind}); snapshots are "
                "stored in every run log, so name the database or host, never the credentials "
                "that reach it",
            )
