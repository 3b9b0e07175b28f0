"""pytest entry point (``pytest11``) of the PolyLoop contract kit.

Without ``--polyloop-contract`` this module adds the flag and nothing else: no fixture, no
test, no import beyond pytest itself. With the flag it registers the kit's default fixtures
(each of which skips its suite and names the fixture to provide) and attaches the suites to
the collection tree:

- under every collected directory whose ``conftest.py`` defines a ``polyloop_*`` name, so that
  conftest's fixtures are the implementation under test (one run can check several
  directories, each with its own implementations);
- when no collected conftest defines one (fixtures come from a plugin, or only files were
  named on the command line), once under the session.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from polyloop_contract._collect import ContractKit

FLAG = "--polyloop-contract"

_ATTACHED = pytest.StashKey[list["ContractKit"]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("polyloop-contract")
    group.addoption(
        FLAG,
        action="store_true",
        default=False,
        help="Run the PolyLoop contract suites against the implementations your fixtures provide.",
    )


def _enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("polyloop_contract", default=False))


def pytest_configure(config: pytest.Config) -> None:
    if not _enabled(config):
        return
    from polyloop_contract import _report, fixtures

    config.stash[_ATTACHED] = []
    _report.install(config)
    config.pluginmanager.register(fixtures.defaults_plugin(config), "polyloop_contract.defaults")


def _conftest_provides_fixtures(config: pytest.Config, conftest: Path) -> bool:
    module = config.pluginmanager.get_plugin(str(conftest))
    if module is None:
        return False
    return any(name.startswith("polyloop_") for name in vars(module))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    config = parent.config
    if file_path.name != "conftest.py" or not _enabled(config):
        return None
    if not _conftest_provides_fixtures(config, file_path):
        return None
    from polyloop_contract._collect import ContractKit

    kit = ContractKit.attach(parent)
    config.stash[_ATTACHED].append(kit)
    return kit


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    if not _enabled(config) or config.stash[_ATTACHED]:
        return
    from polyloop_contract._collect import ContractKit

    kit = ContractKit.attach(session)
    config.stash[_ATTACHED].append(kit)
    items.extend(session.genitems(kit))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if _enabled(item.config) and report.failed and call.excinfo is not None:
        from polyloop_contract._collect import short_failure

        short = short_failure(item, call.excinfo.value)
        if short is not None:
            # Duck-typed like pytest's own TerminalRepr (toterminal, reprcrash), which is private.
            report.longrepr = short  # type: ignore[assignment]
    return report


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    if not _enabled(config):
        return
    from polyloop_contract import _report

    notes = _report.lines(config)
    terminalreporter.section("polyloop-contract report")
    if not notes:
        terminalreporter.write_line("no fixture was missing and no capability was declared off")
    for line in notes:
        terminalreporter.write_line(line)
