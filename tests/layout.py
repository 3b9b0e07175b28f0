"""Where a test module lives: under the module it tests (design record 0058, tests/README.md).

``tests/<distribution>/<path>/test_*.py``: the first folder names the distribution
(``polyloop-<distribution>``), the folders below it a package or module of that distribution's
import package, as the import path reads (``tests/core/session/`` tests ``polyloop.session``,
``tests/stores/postgres/`` ``polyloop.stores.postgres``, ``tests/cli/`` ``polyloop_cli``). A test
of a top-level module sits in the distribution's folder, named after it (``tests/core/
test_tools.py``). Tests about the repository rather than one module have the homes in
:data:`CROSS_CUTTING`. The kind of a test (property, crash, ...) is a marker, not a folder.
"""

from __future__ import annotations

from pathlib import Path

__all__ = [
    "CROSS_CUTTING",
    "DISTRIBUTIONS",
    "KILL_WORD",
    "NOT_A_CRASH",
    "ROOT",
    "TESTS",
    "misplaced",
]

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent

#: The first folder under tests/, and the directory of the import package it mirrors.
DISTRIBUTIONS = {
    "core": "packages/polyloop-core/src/polyloop",
    "stores": "packages/polyloop-stores/src/polyloop/stores",
    "adapters": "packages/polyloop-adapters/src/polyloop/adapters",
    "batch": "packages/polyloop-batch/src/polyloop/batch",
    "cli": "packages/polyloop-cli/src/polyloop_cli",
    "contract": "packages/polyloop-contract/src/polyloop_contract",
    "console": "packages/polyloop-console/src/polyloop_console",
}

#: Folders (relative to tests/) of the tests that are about the repository, not one module.
CROSS_CUTTING = {
    "workspace": "the workspace as a whole: layering across distributions, public names, "
    "packaging and installs, the READMEs, the test harness itself",
    "workspace/scripts": "the repository's scripts/ (bootstrap, preflight)",
}

#: The word by which a module that kills a process is found, as tests/serial_group.py's test does.
KILL_WORD = "SIGKILL"

#: Modules that name that signal without being crash tests, and why.
NOT_A_CRASH = {
    "adapters/container/test_isolation.py": "a sandboxed program kills its own children",
    "workspace/test_serial_group.py": "searches the tests for the word",
}


def misplaced(module: Path) -> str | None:
    """Why ``module`` (a test module under tests/) breaks the layout rule, or None if it keeps it."""
    folder = module.resolve().parent.relative_to(TESTS)
    if folder.as_posix() in CROSS_CUTTING:
        return None
    first, *rest = folder.parts or ("",)
    if first not in DISTRIBUTIONS:
        return (
            f"tests/{folder.as_posix()} names no distribution ({', '.join(DISTRIBUTIONS)}) "
            f"and is not a cross-cutting home ({', '.join(CROSS_CUTTING)})"
        )
    target = ROOT / DISTRIBUTIONS[first] / Path(*rest)
    if target.is_dir() or target.with_suffix(".py").is_file():
        return None
    return (
        f"tests/{folder.as_posix()} names no package or module: "
        f"{target.relative_to(ROOT).as_posix()} does not exist"
    )
