"""Layering across the split ``polyloop`` package: core never imports stores, adapters or the kit,
and stores never import adapters.

import-linter only scans the directory of the regular ``polyloop`` package (core), so these
cross-distribution rules are asserted here by reading every module's AST. The general contract,
derived from every distribution's declared dependencies, is ``test_workspace_layering.py``
(which reuses this module's import reader); the named rules below stay as readable examples.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORE_SRC = ROOT / "packages" / "polyloop-core" / "src"
STORES_SRC = ROOT / "packages" / "polyloop-stores" / "src"
BATCH_SRC = ROOT / "packages" / "polyloop-batch" / "src"

CORE_FORBIDDEN = ("polyloop.stores", "polyloop.adapters", "polyloop.batch", "polyloop_contract")
STORES_FORBIDDEN = ("polyloop.adapters", "polyloop_contract")
#: The batch runner stands on core alone: any store, any adapter, no command.
BATCH_FORBIDDEN = ("polyloop.stores", "polyloop.adapters", "polyloop_contract", "polyloop_cli")

#: Functions that import a module named by their first (string) argument.
_DYNAMIC_IMPORTERS = {"import_module", "__import__"}


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, src: Path) -> Iterator[tuple[int, str]]:
    """(line, module) for every import in ``path``, relative imports resolved against ``src``."""
    module = _module_name(path, src)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts)
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            yield node.lineno, target
            for alias in node.names:  # `from polyloop import stores` imports polyloop.stores
                yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if (
                name in _DYNAMIC_IMPORTERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                yield node.lineno, node.args[0].value


def _matches(target: str, forbidden: str) -> bool:
    return target == forbidden or target.startswith(forbidden + ".")


def forbidden_imports(src: Path, forbidden: tuple[str, ...]) -> list[str]:
    """Describe every import under ``src`` of a module in (or under) ``forbidden``."""
    found = []
    for path in sorted(src.rglob("*.py")):
        for line, target in _imports(path, src):
            if any(_matches(target, name) for name in forbidden):
                found.append(f"{path.relative_to(src)}:{line} imports {target}")
    return found


def test_core_sources_exist() -> None:
    """The checker reads real files: core has its five public modules under src/polyloop."""
    names = {path.name for path in (CORE_SRC / "polyloop").iterdir()}
    assert {"types.py", "ports.py", "tools.py", "serialization", "session"} <= names


def test_core_never_imports_stores_adapters_or_the_contract_kit() -> None:
    """No module of polyloop-core imports polyloop.stores, polyloop.adapters or polyloop_contract."""
    assert forbidden_imports(CORE_SRC, CORE_FORBIDDEN) == []


def test_the_batch_runner_imports_core_only() -> None:
    """No module of polyloop-batch imports stores, adapters, the contract kit or the CLI."""
    assert forbidden_imports(BATCH_SRC, BATCH_FORBIDDEN) == []


def test_stores_never_import_adapters() -> None:
    """No module of polyloop-stores imports polyloop.adapters (or the contract kit)."""
    assert forbidden_imports(STORES_SRC, STORES_FORBIDDEN) == []


@pytest.mark.parametrize(
    "source",
    [
        "import polyloop.stores.memory\n",
        "from polyloop.adapters import gateway\n",
        "from polyloop import stores\n",
        "from .. import adapters\n",
        "from ..stores.sqlite import SqliteRunStore\n",
        "import polyloop_contract.plugin as plugin\n",
        "def f():\n    import polyloop.stores\n",
        "import importlib\nimportlib.import_module('polyloop.adapters.gateway')\n",
        "__import__('polyloop.stores')\n",
    ],
    ids=[
        "import",
        "from-import",
        "from package import submodule",
        "relative",
        "relative from submodule",
        "contract kit",
        "inside a function",
        "importlib",
        "__import__",
    ],
)
def test_checker_catches_a_forbidden_import(source: str, tmp_path: Path) -> None:
    """The checker reports a forbidden import in any of its spellings."""
    package = tmp_path / "polyloop" / "session"
    package.mkdir(parents=True)
    (tmp_path / "polyloop" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "_bad.py").write_text(source)
    found = forbidden_imports(tmp_path, CORE_FORBIDDEN)
    assert len(found) >= 1
    assert all("_bad.py" in entry for entry in found)


@pytest.mark.parametrize(
    "source",
    [
        "import polyloop.types\n",
        "from polyloop.storage_helpers import x\n",
        "from . import _loop\n",
        "import polyloop_contracts\n",
    ],
    ids=["core module", "similar prefix", "relative sibling", "similar kit name"],
)
def test_checker_allows_permitted_imports(source: str, tmp_path: Path) -> None:
    """Imports of core's own modules, and names that merely share a prefix, are not reported."""
    package = tmp_path / "polyloop" / "session"
    package.mkdir(parents=True)
    (package / "_ok.py").write_text(source)
    assert forbidden_imports(tmp_path, CORE_FORBIDDEN) == []


#: polyloop_cli's modules left out of its layers (design 0074): the entry points and the viewer,
#: which is on its way to the console package.
CLI_UNLAYERED = {"__init__", "__main__", "view", "view_page", "view_assets", "view_pending"}


def test_every_part_of_the_cli_is_in_its_layers_contract() -> None:
    """A new subpackage or top-level module of polyloop_cli gets a layer (or is named above)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    (contract,) = [
        contract
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract["name"].startswith("cli layers")
    ]
    layered = {layer.removeprefix("polyloop_cli.") for layer in contract["layers"]}
    package = ROOT / "packages" / "polyloop-cli" / "src" / "polyloop_cli"
    parts = {path.stem for path in package.glob("*.py")} | {
        path.parent.name for path in package.glob("*/__init__.py")
    }
    assert {"commands", "demo", "shared", "rendering"} <= parts
    assert parts - CLI_UNLAYERED == layered
