"""Where a secret hides in an exception: its whole chain, its attributes, its tracebacks.

A message without the password is not enough. ``raise StoreError(...) from None`` inside
``except psycopg.Error`` hides the driver's error from printed tracebacks only: it stays
attached as ``__context__``, and its connection object holds the password. Error reporters
walk that chain (Sentry, the logging module's ``exc_info``), and some show every traceback
frame's local variables (Sentry by default, rich's ``show_locals``) — so a connection string
kept in a local variable of a frame the error passed through travels too.

:func:`find_secret` looks everywhere such a reporter looks, and a little deeper: every
exception reachable through ``__cause__``, ``__context__``, exception groups and attributes;
for each its ``str``, ``repr``, ``args``, notes, and its attributes followed a few levels
down (``repr`` of each, mappings and sequences item by item); and the ``repr`` of every local
variable of every frame of its traceback. :class:`RefusedStore` is what the contract kit's rule
``errors hold no secrets`` is given to provoke such errors.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field

__all__ = ["RefusedStore", "find_secret"]

#: How many levels of attributes below an exception are followed.
_DEPTH = 3
#: How many objects one search looks at, at most (a guard against huge object graphs).
_BUDGET = 20_000
_LEAVES = (str, bytes, bytearray, int, float, complex, bool, type(None))


@dataclass(frozen=True)
class RefusedStore:
    """A store whose storage refuses it, and the secrets it was given.

    ``make`` returns a fresh store (or an async context manager of one, sync or awaitable,
    like ``polyloop_store_factory``) wired so that its storage refuses every read and write:
    a server on a closed port, a wrong password. It may also raise the refusal itself.
    ``secrets`` are the texts it was given that no error may carry anywhere (the password);
    ``name`` says in messages which refusal this is.
    """

    make: Callable[[], object | Awaitable[object]]
    secrets: tuple[str, ...] = field(repr=False)
    name: str = "refused"

    def __post_init__(self) -> None:
        if not self.secrets or not all(isinstance(s, str) and s for s in self.secrets):
            raise ValueError(
                "RefusedStore needs the secrets the store was given (non-empty strings), so "
                "that the kit can look for them in what the store raises."
            )


def _texts(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes | bytearray):
        yield bytes(value).decode("utf-8", "replace")
    try:
        yield repr(value)
    except Exception:  # an object whose repr fails shows nothing a reporter could send
        return


def _attributes(value: object) -> Iterator[tuple[str, object]]:
    """Non-callable attributes (instance dict, slots, properties), each read guardedly."""
    if isinstance(value, Mapping):
        for key, item in list(value.items()):
            yield f"[{key!r}]", key
            yield f"[{key!r}]", item
        return
    if isinstance(value, list | tuple | set | frozenset):
        for index, item in enumerate(value):
            yield f"[{index}]", item
        return
    try:
        names = dir(value)
    except Exception:
        return
    for name in names:
        if name.startswith("__") and name.endswith("__"):
            continue
        try:
            item = getattr(value, name)
        except Exception:
            continue
        if callable(item) and not isinstance(item, type):
            continue
        yield f".{name}", item


class _Search:
    def __init__(self, secrets: tuple[str, ...]) -> None:
        self.secrets = secrets
        self.seen: set[int] = set()
        self.budget = _BUDGET
        self.errors: list[tuple[str, BaseException]] = []

    def holds(self, value: object) -> bool:
        return any(secret in text for text in _texts(value) for secret in self.secrets)

    def first(self, error: BaseException) -> str | None:
        self.errors.append(("the error", error))
        while self.errors:
            where, current = self.errors.pop(0)
            if id(current) in self.seen:
                continue
            self.seen.add(id(current))
            found = self.in_error(where, current)
            if found is not None:
                return found
        return None

    def queue(self, where: str, value: object) -> None:
        if isinstance(value, BaseException) and id(value) not in self.seen:
            self.errors.append((where, value))

    def in_error(self, where: str, error: BaseException) -> str | None:
        name = f"{where} ({type(error).__name__})"
        for part, value in (
            ("str", str(error) if _safe_str(error) else ""),
            ("repr", error),
            ("args", error.args),
            ("__notes__", getattr(error, "__notes__", None)),
        ):
            if self.holds(value):
                return f"{name}: its {part}"
        self.queue(f"{where}.__cause__", error.__cause__)
        self.queue(f"{where}.__context__", error.__context__)
        if isinstance(error, BaseExceptionGroup):
            for index, member in enumerate(error.exceptions):
                self.queue(f"{where}.exceptions[{index}]", member)
        found = self.in_attributes(name, error, _DEPTH)
        if found is not None:
            return found
        traceback = error.__traceback__
        if where == "the error" and traceback is not None:
            traceback = traceback.tb_next  # the frame that caught it is the caller's own
        return self.in_traceback(name, traceback)

    def in_attributes(self, where: str, value: object, depth: int, path: str = "") -> str | None:
        for label, item in _attributes(value):
            if self.budget <= 0:
                return None
            self.budget -= 1
            here = f"{path}{label}"
            if isinstance(item, BaseException):
                self.queue(f"{where}{here}", item)
                continue
            if isinstance(item, types.TracebackType | types.FrameType | types.ModuleType):
                continue
            if self.holds(item):
                return f"{where}: attribute {here.lstrip('.')}"
            if depth > 1 and not isinstance(item, _LEAVES) and id(item) not in self.seen:
                self.seen.add(id(item))
                found = self.in_attributes(where, item, depth - 1, here)
                if found is not None:
                    return found
        return None

    def in_traceback(self, where: str, traceback: types.TracebackType | None) -> str | None:
        while traceback is not None:
            frame = traceback.tb_frame
            for local, value in frame.f_locals.items():
                if isinstance(value, BaseException):
                    self.queue(f"{where}, local {local!r}", value)
                elif self.holds(value):
                    code = frame.f_code
                    return (
                        f"{where}: local variable {local!r} of {code.co_name}() "
                        f"({code.co_filename}:{traceback.tb_lineno}) in its traceback"
                    )
            traceback = traceback.tb_next
        return None


def _safe_str(error: BaseException) -> bool:
    try:
        str(error)
    except Exception:
        return False
    return True


def find_secret(error: BaseException, secrets: tuple[str, ...]) -> str | None:
    """Where in ``error`` one of ``secrets`` appears (e.g. ``"the error.__context__
    (OperationalError): attribute pgconn"``), or ``None`` when it appears nowhere a reporter
    looks: see the module docstring for what is searched. The frame that caught ``error``
    (the first of its traceback) is the caller's own and is not searched."""
    return _Search(tuple(s for s in secrets if s)).first(error)
