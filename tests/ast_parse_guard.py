"""A guard against CPython's gh-106905, installed for the whole test tree by tests/conftest.py.

On CPython 3.11 (Debian 12's 3.11.2 and later 3.11 releases alike) ``ast.parse`` keeps its
recursion counter in state shared by the interpreter: a second parse that starts while the first
one is building its tree (a finalizer run by the garbage collector, another thread) leaves the
counter off, and the first one raises ``SystemError: AST constructor recursion depth mismatch``
although its source is fine. pytest parses test sources while it formats a failure's
traceback, so one failing test could abort the whole run with ``INTERNALERROR``.

The guard retries such a parse once with the garbage collector paused: with no collection, no
finalizer runs and no other thread gets the GIL while the tree is built, so the retry cannot be
disturbed. Every other error, and every other ``SystemError``, is raised unchanged. See design
record 0042.
"""

from __future__ import annotations

import ast
import functools
import gc
from typing import Any

__all__ = ["MISMATCH", "install"]

#: The start of the message of the spurious error.
MISMATCH = "AST constructor recursion depth mismatch"


def _guarded(parse: Any) -> Any:
    @functools.wraps(parse)
    def parse_retrying_a_spurious_mismatch(*args: Any, **kwargs: Any) -> Any:
        try:
            return parse(*args, **kwargs)
        except SystemError as error:
            if not str(error).startswith(MISMATCH):
                raise
        paused = gc.isenabled()
        gc.disable()
        try:
            return parse(*args, **kwargs)
        finally:
            if paused:
                gc.enable()

    parse_retrying_a_spurious_mismatch.__polyloop_guard__ = True  # type: ignore[attr-defined]
    return parse_retrying_a_spurious_mismatch


def install() -> None:
    """Guard ``ast.parse`` in this process (idempotent)."""
    if not getattr(ast.parse, "__polyloop_guard__", False):
        ast.parse = _guarded(ast.parse)
