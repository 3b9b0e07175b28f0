"""No third-party type appears in any public signature of polyloop core.

A third-party type in a public signature would tie PolyLoop's major version to that package's.
The checker walks every public name of every public core module, resolves every annotation
(``typing.get_type_hints``) and every type nested inside it, and reports each type whose module
is neither the standard library nor ``polyloop``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import subprocess
import sys
import textwrap
import types
import typing
from collections.abc import Iterator
from typing import Any, ForwardRef, TypeVar

import pytest

PUBLIC_MODULES = (
    "polyloop",
    "polyloop.types",
    "polyloop.ports",
    "polyloop.tools",
    "polyloop.serialization",
    "polyloop.session",
    "polyloop.recovery",
    "polyloop.errors",
    "polyloop.testing",
)

#: Roots of modules whose types may appear in a public signature.
ALLOWED_ROOTS = frozenset(sys.stdlib_module_names) | {"builtins", "polyloop"}


def _module_root(obj: object) -> str | None:
    module = getattr(obj, "__module__", None)
    return module.split(".")[0] if isinstance(module, str) else None


def _types_in(annotation: object, namespace: dict[str, Any], seen: set[int]) -> Iterator[object]:
    """Every class or alias object mentioned anywhere inside ``annotation``."""
    if id(annotation) in seen:
        return
    seen.add(id(annotation))
    if isinstance(annotation, str):
        annotation = ForwardRef(annotation)
    if isinstance(annotation, ForwardRef):
        # Raises NameError for a name that cannot be resolved: a public signature must be
        # resolvable at run time, otherwise the checker could not see what it names.
        resolved = eval(annotation.__forward_arg__, namespace)
        yield from _types_in(resolved, namespace, seen)
        return
    if isinstance(annotation, TypeVar):
        for bound in (annotation.__bound__, *annotation.__constraints__):
            if bound is not None:
                yield from _types_in(bound, namespace, seen)
        return
    origin = typing.get_origin(annotation)
    if origin is not None:
        yield origin
        for argument in typing.get_args(annotation):
            if isinstance(argument, list):  # Callable[[...], R]
                for item in argument:
                    yield from _types_in(item, namespace, seen)
            else:
                yield from _types_in(argument, namespace, seen)
        return
    if annotation is None or annotation is Ellipsis or isinstance(annotation, int | bool):
        return
    yield annotation


def _hints(obj: Any, namespace: dict[str, Any]) -> dict[str, Any]:
    return typing.get_type_hints(obj, globalns=namespace, localns=namespace)


def _namespace_of(obj: Any, default: dict[str, Any]) -> dict[str, Any]:
    """The globals an object's string annotations are written against (its defining module)."""
    module = sys.modules.get(getattr(obj, "__module__", ""))
    return default if module is None else dict(vars(module))


def _public_callables(cls: type[Any]) -> Iterator[tuple[str, Any]]:
    for name, value in vars(cls).items():
        if name.startswith("_") and name not in ("__init__", "__call__", "__new__"):
            continue
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, property):
            if value.fget is not None:
                yield f"{name}.fget", value.fget
            continue
        if inspect.isfunction(value) and value.__module__.startswith(cls.__module__.split(".")[0]):
            yield name, value


def _annotations_of(module: types.ModuleType) -> Iterator[tuple[str, object]]:
    """(where, annotation) for every annotation of every public name of ``module``."""
    namespace = dict(vars(module))
    for name in getattr(module, "__all__", ()):
        obj = getattr(module, name)
        where = f"{module.__name__}.{name}"
        if isinstance(obj, types.ModuleType):
            continue
        if inspect.isclass(obj):
            namespace_of_class = _namespace_of(obj, namespace)
            if _module_root(obj) not in ALLOWED_ROOTS:
                yield where, obj
                continue
            for base in obj.__mro__[1:]:
                yield f"{where} (base)", base
            if dataclasses.is_dataclass(obj) or "__annotations__" in vars(obj):
                for field_name, hint in _hints(obj, namespace_of_class).items():
                    yield f"{where}.{field_name}", hint
            for method_name, function in _public_callables(obj):
                for parameter, hint in _hints(function, namespace_of_class).items():
                    yield f"{where}.{method_name}({parameter})", hint
        elif inspect.isfunction(obj):
            for parameter, hint in _hints(obj, _namespace_of(obj, namespace)).items():
                yield f"{where}({parameter})", hint
        elif typing.get_origin(obj) is not None or isinstance(obj, TypeVar | ForwardRef):
            yield where, obj  # a type alias such as Decision or ToolHandler
        else:
            yield f"{where} (value type)", type(obj)


def third_party_types(module: types.ModuleType) -> list[str]:
    """Describe every third-party type reachable from a public signature of ``module``."""
    namespace = dict(vars(module))
    found: list[str] = []
    for where, annotation in _annotations_of(module):
        for kind in _types_in(annotation, namespace, set()):
            root = _module_root(kind)
            if root is not None and root not in ALLOWED_ROOTS:
                found.append(f"{where}: {kind!r} from {kind.__module__}")  # type: ignore[attr-defined]
    return found


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_no_third_party_type_in_public_signatures(module_name: str) -> None:
    """Every annotation reachable from the module's `__all__` names only stdlib or polyloop types."""
    module = importlib.import_module(module_name)
    assert third_party_types(module) == []


@pytest.mark.parametrize("module_name", PUBLIC_MODULES[1:])
def test_every_public_module_declares_its_public_names(module_name: str) -> None:
    """Each public module has an `__all__` (the checker reads it) whose names all exist."""
    module = importlib.import_module(module_name)
    assert module.__all__
    assert [name for name in module.__all__ if not hasattr(module, name)] == []


@pytest.mark.parametrize("module_name", PUBLIC_MODULES[1:])
def test_all_lists_every_public_definition(module_name: str) -> None:
    """Every public class or function a module (or its private submodules) defines is in `__all__`,
    so the purity check above cannot miss it."""
    module = importlib.import_module(module_name)
    defined = sorted(
        name
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and (obj.__module__ == module_name or obj.__module__.startswith(module_name + "._"))
    )
    assert [name for name in defined if name not in module.__all__] == []


def test_checker_sees_annotations_of_every_kind() -> None:
    """The checker walks fields, methods, functions, aliases and properties of real modules."""
    from polyloop import session, tools

    places = [where for where, _ in _annotations_of(tools)] + [
        where for where, _ in _annotations_of(session)
    ]
    assert "polyloop.tools.Tool.handler" in places
    assert "polyloop.tools.ToolRegistry.restrict_to(names)" in places
    assert "polyloop.tools.RegistryExecutor.registry.fget(return)" in places
    assert "polyloop.tools.ToolHandler" in places
    assert "polyloop.session.RunRequest.tools" in places
    assert "polyloop.session.run(definition)" in places


def _synthetic_module(source: str, monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A throwaway module named like a polyloop module, registered only for this test."""
    module = types.ModuleType("polyloop.synthetic_probe")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(textwrap.dedent(source), module.__dict__)
    return module


@pytest.mark.parametrize(
    "source",
    [
        """
        from jsonschema.protocols import Validator
        __all__ = ["check"]
        def check(validator: Validator) -> None: ...
        """,
        """
        from __future__ import annotations
        from collections.abc import Mapping
        from jsonschema.protocols import Validator
        __all__ = ["check"]
        def check(validators: Mapping[str, list[Validator]]) -> None: ...
        """,
        """
        from __future__ import annotations
        from dataclasses import dataclass
        from jsonschema.protocols import Validator
        __all__ = ["Holder"]
        @dataclass(frozen=True, slots=True)
        class Holder:
            validator: Validator | None
        """,
        """
        from jsonschema.protocols import Validator
        __all__ = ["Owner"]
        class Owner:
            def validator(self) -> "Validator": ...
        """,
        """
        from collections.abc import Callable
        from jsonschema.exceptions import ValidationError
        __all__ = ["Handler"]
        Handler = Callable[[ValidationError], str]
        """,
        """
        from jsonschema.exceptions import ValidationError
        __all__ = ["MyError"]
        class MyError(ValidationError): ...
        """,
    ],
    ids=["parameter", "nested generic", "dataclass field", "method return", "alias", "base class"],
)
def test_checker_fails_when_a_third_party_type_is_added(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checker reports a jsonschema type placed in a public signature, wherever it hides."""
    found = third_party_types(_synthetic_module(source, monkeypatch))
    assert found != []
    assert all("from jsonschema" in entry for entry in found)


def test_checker_accepts_a_stdlib_only_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module annotated only with stdlib and polyloop types passes the checker."""
    source = """
        from __future__ import annotations
        from collections.abc import Mapping, Sequence
        from pathlib import Path
        from polyloop.types import StepRecord
        __all__ = ["save"]
        def save(path: Path, rows: Sequence[StepRecord], meta: Mapping[str, int]) -> None: ...
    """
    assert third_party_types(_synthetic_module(source, monkeypatch)) == []


def test_jsonschema_is_imported_lazily() -> None:
    """`import polyloop.session` in a fresh interpreter does not import jsonschema."""
    code = "import sys, polyloop.session; print('jsonschema' in sys.modules)"
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert output.strip() == "False"


def test_jsonschema_is_imported_once_a_registry_has_tools() -> None:
    """The lazy import happens when a registry with tools is built (so the probe above is meaningful)."""
    code = textwrap.dedent(
        """
        import sys
        from polyloop.tools import Tool, ToolRegistry, ToolSpec
        ToolRegistry([Tool(ToolSpec("t", "d", {"type": "object"}), lambda a: "")])
        print('jsonschema' in sys.modules)
        """
    )
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout
    assert output.strip() == "True"
