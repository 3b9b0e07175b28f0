"""The adapters' public surface: no third-party type in a public signature, and the gateway
stays importable without the MCP extra."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap
import typing

import pytest

ALLOWED_ROOTS = frozenset(sys.stdlib_module_names) | {"builtins", "polyloop"}


def _classes_in(annotation: object) -> typing.Iterator[object]:
    origin = typing.get_origin(annotation)
    if origin is not None:
        yield origin
        for argument in typing.get_args(annotation):
            items = argument if isinstance(argument, list) else [argument]
            for item in items:
                yield from _classes_in(item)
    elif annotation is not None and annotation is not Ellipsis:
        yield annotation


def _foreign_types(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    found: list[str] = []
    for public in module.__all__:
        obj = getattr(module, public)
        targets: list[tuple[str, object]] = []
        if inspect.isclass(obj):
            targets.append((public, obj))
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr not in ("__init__", "__aenter__", "__aexit__"):
                    continue
                if inspect.isfunction(member):
                    targets.append((f"{public}.{attr}", member))
                elif isinstance(member, property) and member.fget is not None:
                    targets.append((f"{public}.{attr}", member.fget))
        elif callable(obj):
            targets.append((public, obj))
        for where, target in targets:
            home = inspect.getmodule(target) or module
            hints = typing.get_type_hints(target, vars(home))
            for name, annotation in hints.items():
                for kind in _classes_in(annotation):
                    root = getattr(kind, "__module__", "builtins").split(".")[0]
                    if root not in ALLOWED_ROOTS:
                        found.append(f"{where} {name}: {kind!r}")
    return found


@pytest.mark.parametrize("module_name", ["polyloop.adapters.gateway", "polyloop.adapters.mcp"])
def test_no_third_party_type_in_a_public_signature(module_name: str) -> None:
    """No public signature of the gateway or MCP adapter names a third-party type."""
    assert _foreign_types(module_name) == []


def test_the_checker_sees_a_third_party_type() -> None:
    """Guards the check above against passing vacuously."""
    assert _foreign_types_of_fixture() == ["f client: <class 'httpx.AsyncClient'>"]


def _foreign_types_of_fixture() -> list[str]:
    import types

    fake = types.ModuleType("fake_public")
    source = textwrap.dedent(
        """
        import httpx
        __all__ = ["f"]
        def f(client: httpx.AsyncClient) -> None: ...
        """
    )
    exec(source, fake.__dict__)
    sys.modules["fake_public"] = fake
    try:
        return _foreign_types("fake_public")
    finally:
        del sys.modules["fake_public"]


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_gateway_does_not_import_the_mcp_sdk() -> None:
    """Importing the gateway adapter does not import the MCP SDK."""
    done = _run(
        """
        import sys
        import polyloop.adapters.gateway
        print(sorted(m for m in sys.modules if m == "mcp" or m.startswith("mcp.")))
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_mcp_adapter_without_the_extra_says_how_to_install_it() -> None:
    """Without the MCP SDK, importing the MCP adapter fails naming the extra to install."""
    done = _run(
        """
        import sys
        sys.modules["mcp"] = None  # as if the extra were not installed
        try:
            import polyloop.adapters.mcp
        except ImportError as error:
            print(error)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'polyloop-adapters[mcp]'" in done.stdout
