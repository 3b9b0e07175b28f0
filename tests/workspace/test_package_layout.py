"""One ``polyloop`` import package split over four distributions works in the workspace and from wheels."""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.readme_examples import examples
from tests.xdist_env import outside_xdist

ROOT = Path(__file__).resolve().parents[2]
FIVE_MODULES = "['ports', 'serialization', 'session', 'tools', 'types']"
DISTRIBUTIONS = ("polyloop-core", "polyloop-stores", "polyloop-adapters", "polyloop-contract")
#: Every distribution of the workspace, the command's included.
PUBLISHED = (*DISTRIBUTIONS, "polyloop-cli", "polyloop-batch", "polyloop-console")
#: What an index page cannot show: links into the repository, which no wheel carries.
REPOSITORY_LINK = re.compile(
    r"\]\((?!https?://|#)|\.\./\.\./|(?<![\w-])(?:research-wiki|examples|bench)/"
)


def _clean_env() -> dict[str, str]:
    """The environment without anything that would leak the workspace into a fresh venv."""
    env = outside_xdist(os.environ)
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "UV_PROJECT_ENVIRONMENT"):
        env.pop(name, None)
    return env


def _run(args: Sequence[str | Path], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    completed = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env if env is not None else _clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert completed.returncode == 0, (
        f"{' '.join(str(a) for a in args)} failed ({completed.returncode}):\n"
        f"{completed.stdout}\n{completed.stderr}"
    )
    return completed.stdout


def _python(
    code: str, *, interpreter: Path | str, cwd: Path, env: dict[str, str] | None = None
) -> str:
    return _run([interpreter, "-c", textwrap.dedent(code)], cwd=cwd, env=env).strip()


# ---------------------------------------------------------------------------
# The editable workspace
# ---------------------------------------------------------------------------


def test_top_level_prints_the_five_modules(tmp_path: Path) -> None:
    """`python -c "import polyloop; print(polyloop.__all__)"` prints the five public modules."""
    output = _python(
        "import polyloop; print(polyloop.__all__)", interpreter=sys.executable, cwd=tmp_path
    )
    assert output == FIVE_MODULES


def test_stores_and_adapters_resolve_in_the_workspace(tmp_path: Path) -> None:
    """In the editable workspace `polyloop.stores` and `polyloop.adapters` come from their own packages."""
    output = _python(
        """
        import polyloop.stores, polyloop.adapters, polyloop.types
        print(polyloop.types.__file__)
        print(polyloop.stores.__file__)
        print(polyloop.adapters.__file__)
        """,
        interpreter=sys.executable,
        cwd=tmp_path,
    )
    core, stores, adapters = (Path(line) for line in output.splitlines())
    assert (ROOT / "packages" / "polyloop-core" / "src") in core.parents
    assert (ROOT / "packages" / "polyloop-stores" / "src") in stores.parents
    assert (ROOT / "packages" / "polyloop-adapters" / "src") in adapters.parents


def test_top_level_import_does_not_import_stores_or_adapters(tmp_path: Path) -> None:
    """`import polyloop` imports the five modules only: stores and adapters must be asked for."""
    output = _python(
        """
        import sys, polyloop
        print(sorted(m for m in sys.modules if m.startswith(("polyloop.stores", "polyloop.adapters"))))
        """,
        interpreter=sys.executable,
        cwd=tmp_path,
    )
    assert output == "[]"


# ---------------------------------------------------------------------------
# Built wheels in a fresh virtual environment
# ---------------------------------------------------------------------------


def _uv() -> str:
    """The uv running this test (`uv run` and scripts/bootstrap-uv.sh set UV), else PATH's."""
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv is not None, "no uv: run the tests through scripts/test.sh, which installs one"
    return uv


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheels of every distribution (the four of SPEC §2, the command, the batch runner),
    from this checkout."""
    out = tmp_path_factory.mktemp("wheels")
    for distribution in PUBLISHED:
        _run([_uv(), "build", "--package", distribution, "--wheel", "-o", out], cwd=ROOT)
    built = sorted(path.name.split("-")[0] for path in out.glob("*.whl"))
    assert built == sorted(name.replace("-", "_") for name in PUBLISHED)
    return out


def _fresh_venv(where: Path) -> Path:
    _run([_uv(), "venv", "--quiet", "--python", sys.executable, where / "venv"], cwd=where)
    return where / "venv" / "bin" / "python"


def _install(python: Path, wheels: Path, *requirements: str, extra: Sequence[str] = ()) -> None:
    _run(
        [
            _uv(),
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            "--find-links",
            wheels,
            *extra,
            *requirements,
        ],
        cwd=python.parent,
    )


@pytest.mark.slow
def test_wheels_installed_together_resolve_every_subpackage(wheels: Path, tmp_path: Path) -> None:
    """From wheels in a fresh venv: `polyloop.__all__` is the five modules and stores/adapters import."""
    python = _fresh_venv(tmp_path)
    _install(python, wheels, "polyloop-core", "polyloop-stores", "polyloop-adapters")
    output = _python(
        """
        import polyloop, polyloop.stores.memory, polyloop.adapters, polyloop.session
        print(polyloop.__all__)
        print(polyloop.stores.memory.__file__)
        """,
        interpreter=python,
        cwd=tmp_path,
    )
    all_line, memory_file = output.splitlines()
    assert all_line == FIVE_MODULES
    assert (tmp_path / "venv") in Path(memory_file).parents
    assert ROOT not in Path(memory_file).parents


@pytest.mark.slow
def test_wheels_in_separate_locations_still_form_one_package(wheels: Path, tmp_path: Path) -> None:
    """Core in the venv and stores in another directory on `sys.path` still give `polyloop.stores`."""
    python = _fresh_venv(tmp_path)
    _install(python, wheels, "polyloop-core")
    elsewhere = tmp_path / "elsewhere"
    _install(python, wheels, "polyloop-stores", extra=["--no-deps", "--target", str(elsewhere)])
    env = _clean_env()
    env["PYTHONPATH"] = str(elsewhere)
    output = _python(
        "import polyloop.stores.memory as m, polyloop; print(m.__file__); print(polyloop.__all__)",
        interpreter=python,
        cwd=tmp_path,
        env=env,
    )
    memory_file, all_line = output.splitlines()
    assert elsewhere in Path(memory_file).parents
    assert all_line == FIVE_MODULES


@pytest.mark.slow
def test_core_wheel_alone_pulls_nothing_heavy(wheels: Path, tmp_path: Path) -> None:
    """`polyloop-core` alone installs and imports, without httpx, pytest, syrupy or stores/adapters."""
    python = _fresh_venv(tmp_path)
    _install(python, wheels, "polyloop-core")
    installed = _run([_uv(), "pip", "freeze", "--python", python], cwd=tmp_path).lower()
    names = {line.split("==")[0].split(" @ ")[0] for line in installed.splitlines() if line}
    assert "polyloop-core" in names
    assert names.isdisjoint(
        {"httpx", "pytest", "hypothesis", "syrupy", "polyloop-stores", "polyloop-adapters"}
    )
    output = _python(
        """
        import importlib.util, polyloop
        print(polyloop.__all__)
        print(importlib.util.find_spec("polyloop.stores"))
        """,
        interpreter=python,
        cwd=tmp_path,
    )
    assert output.splitlines() == [FIVE_MODULES, "None"]


# ---------------------------------------------------------------------------
# What a package index shows: license, metadata, README
# ---------------------------------------------------------------------------


def test_every_distribution_ships_the_repository_license() -> None:
    """Each distribution's LICENSE (what its wheel carries) is the repository's MIT license."""
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "MIT License" == license_text.splitlines()[0]
    assert "Copyright (c) 2026 PolyLoop developers" in license_text
    copies = {
        name: (ROOT / "packages" / name / "LICENSE").read_text(encoding="utf-8")
        for name in PUBLISHED
    }
    assert dict.fromkeys(PUBLISHED, license_text) == copies


def _metadata(wheel: Path) -> tuple[email.message.Message, str]:
    """The wheel's METADATA, and its LICENSE as the wheel carries it."""
    with zipfile.ZipFile(wheel) as archive:
        (info,) = {name.split("/")[0] for name in archive.namelist() if ".dist-info/" in name}
        metadata = email.parser.Parser().parsestr(archive.read(f"{info}/METADATA").decode())
        return metadata, archive.read(f"{info}/licenses/LICENSE").decode()


@pytest.mark.slow
def test_every_wheel_carries_license_classifiers_bounds_and_a_readme_of_its_own(
    wheels: Path,
) -> None:
    """Each wheel has the LICENSE file, an MIT license expression, classifiers, bounded
    dependencies on its sibling distributions, and a README that links nowhere into the repo."""
    license_text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    for wheel in sorted(wheels.glob("*.whl")):
        metadata, carried = _metadata(wheel)
        name = metadata["Name"]
        assert (name, license_text) == (name, carried)
        assert (name, "MIT", ["LICENSE"]) == (
            name,
            metadata["License-Expression"],
            metadata.get_all("License-File"),
        )
        classifiers = set(metadata.get_all("Classifier") or ())
        assert {
            "Development Status :: 3 - Alpha",
            "Programming Language :: Python :: 3.11",
            "Typing :: Typed",
        } <= classifiers, name
        siblings = sorted(  # the environment marker of an extra (`; extra == "x"`) aside
            requirement.split(";")[0].strip()
            for requirement in metadata.get_all("Requires-Dist") or ()
            if requirement.startswith("polyloop-")
        )
        # Hatchling writes the bounds sorted: `polyloop-core<0.2,>=0.1.0`.
        bounded = [re.sub(r"<0\.2,>=0\.1\.0$", "", requirement) for requirement in siblings]
        assert (name, [f"{unbounded}<0.2,>=0.1.0" for unbounded in bounded]) == (name, siblings)
        readme = metadata.get_payload()
        assert isinstance(readme, str)
        assert (name, []) == (name, REPOSITORY_LINK.findall(readme))


# ---------------------------------------------------------------------------
# The READMEs' runnable examples, from wheels, with exactly what they name
# ---------------------------------------------------------------------------


def _installed(python: Path, where: Path) -> set[str]:
    frozen = _run([_uv(), "pip", "freeze", "--python", python], cwd=where).lower()
    return {line.split("==")[0].split(" @ ")[0] for line in frozen.splitlines() if line}


@pytest.mark.slow
def test_the_quick_start_runs_with_exactly_the_distributions_it_names(
    wheels: Path, tmp_path: Path
) -> None:
    """README.md's quick-start, in an empty venv holding only what its `pip install` names."""
    quick_start = examples()[0]
    python = _fresh_venv(tmp_path)
    _install(python, wheels, *quick_start.installs)
    (tmp_path / "quickstart.py").write_text(quick_start.code)

    output = _run([python, tmp_path / "quickstart.py"], cwd=tmp_path)

    assert output.strip() == "agent_finished 2 + 3 = 5"
    polyloop = {name for name in _installed(python, tmp_path) if name.startswith("polyloop")}
    assert polyloop == set(quick_start.installs)


@pytest.mark.slow
def test_core_alone_holds_no_store_so_the_quick_start_names_the_stores(
    wheels: Path, tmp_path: Path
) -> None:
    """`pip install polyloop-core` alone runs the quick-start only as far as its store import."""
    python = _fresh_venv(tmp_path)
    _install(python, wheels, "polyloop-core")
    (tmp_path / "quickstart.py").write_text(examples()[0].code)

    done = subprocess.run(
        [python, tmp_path / "quickstart.py"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )

    assert done.returncode == 1
    assert "ModuleNotFoundError: No module named 'polyloop.stores'" in done.stderr


@pytest.mark.slow
def test_the_snapshot_example_runs_with_exactly_the_distributions_it_names(
    wheels: Path, tmp_path: Path
) -> None:
    """The contract kit README's snapshot example, in a new project whose venv holds only what
    its `pip install` names: the first run writes the snapshots, the second passes on them."""
    (agent,) = [e for e in examples() if "def order_agent" in e.code]
    (test,) = [e for e in examples() if "def test_order_lookup" in e.code]
    assert agent.installs == test.installs
    python = _fresh_venv(tmp_path)
    _install(python, wheels, *test.installs)
    project = tmp_path / "project"
    project.mkdir()
    (project / "agent.py").write_text(agent.code)
    (project / "test_trajectory.py").write_text(test.code)
    readme = (ROOT / "packages" / "polyloop-contract" / "README.md").read_text()
    ini = re.search(r"<!-- pytest-ini -->\s*```ini\n(.*?)```", readme, re.S)
    assert ini is not None, "the contract kit README lost its pytest-ini block"
    (project / "pytest.ini").write_text(textwrap.dedent(ini.group(1)))
    pytest_command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider"]

    first = _run([*pytest_command, "--snapshot-update"], cwd=project)
    again = _run(pytest_command, cwd=project)

    assert "2 snapshots generated" in first
    assert "1 passed" in again
    assert "2 snapshots passed" in again
    polyloop = {name for name in _installed(python, tmp_path) if name.startswith("polyloop")}
    assert polyloop == {*test.installs, "polyloop-core"}
