"""One layering contract for the whole workspace, derived from what each distribution declares.

Every ``packages/*/pyproject.toml`` says which sibling distributions it depends on (its
``dependencies`` and its extras) and which import packages its wheel holds. From that alone:

1. a module may import another distribution's modules only when its own distribution declares
   that one (so core imports no sibling, stores never import adapters, the kit never imports
   the CLI, and a new edge needs a line in a ``pyproject.toml``, where a reviewer sees it);
2. a module never imports another distribution's *private* modules (a dotted name with a part
   that starts with ``_`` below that distribution's import package): what a distribution shares
   is its public modules.

import-linter scans only the directory of core's regular ``polyloop`` package, so the
cross-distribution rules live here; the layers inside core stay import-linter contracts in the
root ``pyproject.toml``. Imports are read from the AST, in every spelling the checker in
``test_layering.py`` knows (relative, inside functions, ``importlib.import_module``).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.workspace.test_layering import _imports

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class Distribution:
    name: str
    src: Path
    #: The import packages its wheel holds (``polyloop``, ``polyloop.stores``, ``polyloop_cli``).
    roots: tuple[str, ...]
    #: Sibling distributions it declares, in ``dependencies`` or an extra.
    siblings: frozenset[str]


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.-]+", requirement)
    assert match is not None, requirement
    return match.group(0)


def workspace_distributions(root: Path = ROOT) -> list[Distribution]:
    found = []
    for pyproject in sorted(root.glob("packages/*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        project = data["project"]
        requirements = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            requirements += extra
        siblings = frozenset(
            name
            for name in map(_requirement_name, requirements)
            if name.startswith("polyloop-") and name != project["name"]
        )
        wheel = data["tool"]["hatch"]["build"]["targets"]["wheel"]
        paths = wheel.get("packages") or wheel.get("only-include")
        roots = tuple(path.removeprefix("src/").replace("/", ".") for path in paths)
        found.append(Distribution(project["name"], pyproject.parent / "src", roots, siblings))
    return found


def owner_of(module: str, distributions: list[Distribution]) -> tuple[Distribution, str] | None:
    """The distribution whose import package holds ``module`` (the longest root wins, so
    ``polyloop.stores.x`` belongs to stores, ``polyloop.types`` to core), and that root."""
    best: tuple[Distribution, str] | None = None
    for distribution in distributions:
        for root in distribution.roots:
            if (module == root or module.startswith(root + ".")) and (
                best is None or len(root) > len(best[1])
            ):
                best = (distribution, root)
    return best


def violations(distributions: list[Distribution]) -> list[str]:
    """One line per import that breaks rule 1 or rule 2."""
    found = []
    for distribution in distributions:
        for path in sorted(distribution.src.rglob("*.py")):
            mine = owner_of(_module_name(path, distribution.src), distributions)
            if mine is None or mine[0] is not distribution:
                continue  # a file of another distribution's package dir (not in this wheel)
            reported: set[int] = set()
            for line, target in _imports(path, distribution.src):
                if line in reported:
                    continue  # `from a.b import c` also yields a.b.c: one report a line
                owned = owner_of(target, distributions)
                if owned is None or owned[0] is distribution:
                    continue
                other, root = owned
                where = f"{distribution.name}: {path.relative_to(distribution.src)}:{line}"
                if other.name not in distribution.siblings:
                    found.append(
                        f"{where} imports {target} of {other.name}, which it does not declare"
                    )
                    reported.add(line)
                elif any(part.startswith("_") for part in target[len(root) :].split(".")):
                    found.append(f"{where} imports {target}, a private module of {other.name}")
                    reported.add(line)
    return found


def _module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def test_every_distribution_is_read() -> None:
    """The contract is derived from all seven distributions of the workspace."""
    names = {distribution.name for distribution in workspace_distributions()}
    assert {
        "polyloop-core",
        "polyloop-stores",
        "polyloop-adapters",
        "polyloop-contract",
        "polyloop-cli",
        "polyloop-batch",
        "polyloop-console",
    } == names


def test_no_import_crosses_an_undeclared_edge_or_into_a_private_module() -> None:
    """No module imports a distribution its own does not declare, or another one's private module."""
    assert [] == violations(workspace_distributions())


def _fake_workspace(tmp_path: Path, source: str, *, cli_depends_on_stores: bool) -> Path:
    """Two distributions: core (``polyloop``) and a cli (``polyloop_cli``) holding ``source``."""
    for name, package, deps in (
        ("polyloop-core", "polyloop", []),
        ("polyloop-stores", "polyloop/stores", ["polyloop-core"]),
        (
            "polyloop-cli",
            "polyloop_cli",
            ["polyloop-core", *(["polyloop-stores"] if cli_depends_on_stores else [])],
        ),
    ):
        folder = tmp_path / "packages" / name
        (folder / "src" / package).mkdir(parents=True)
        (folder / "src" / package / "__init__.py").write_text("")
        key = "packages" if name != "polyloop-stores" else "only-include"
        (folder / "pyproject.toml").write_text(
            f'[project]\nname = "{name}"\ndependencies = {deps!r}\n'
            f'[tool.hatch.build.targets.wheel]\n{key} = ["src/{package}"]\n'
        )
    (tmp_path / "packages" / "polyloop-cli" / "src" / "polyloop_cli" / "main.py").write_text(source)
    return tmp_path


@pytest.mark.parametrize(
    ("source", "declared", "expected"),
    [
        ("import polyloop.stores.sqlite\n", False, "does not declare"),
        ("from polyloop.stores import sqlite\n", False, "does not declare"),
        ("from polyloop.stores._schema import TABLE\n", True, "private module"),
        ("from polyloop.session._loop import Driver\n", True, "private module"),
        ("import polyloop._frozen\n", True, "private module"),
    ],
    ids=["undeclared", "undeclared from-import", "private of a sibling", "private core", "core _x"],
)
def test_checker_reports_each_kind_of_violation(
    source: str, declared: bool, expected: str, tmp_path: Path
) -> None:
    """An undeclared edge and a private module of another distribution are both reported."""
    root = _fake_workspace(tmp_path, source, cli_depends_on_stores=declared)
    found = violations(workspace_distributions(root))
    assert len(found) == 1
    assert expected in found[0]


@pytest.mark.parametrize(
    "source",
    ["import polyloop.stores.sqlite\n", "from polyloop.types import Role\n", "from . import x\n"],
    ids=["declared public", "core public", "own module"],
)
def test_checker_allows_declared_public_imports(source: str, tmp_path: Path) -> None:
    """A declared sibling's public module, core's public modules and one's own modules pass."""
    root = _fake_workspace(tmp_path, source, cli_depends_on_stores=True)
    assert [] == violations(workspace_distributions(root))
