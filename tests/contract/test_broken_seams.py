"""The parser, model client, executor and sink suites catch real defects too."""

from __future__ import annotations

import pytest

from tests.contract._runner import PYTEST_INI, Result, run_contract
from tests.contract.broken_seams import CAUGHT_BY

#: Each test here runs pytest in a subprocess.
pytestmark = pytest.mark.slow

CONFTEST = """\
import pytest
from polyloop.ports import Action
from polyloop.testing import ScriptedExecutor
from tests.contract import broken_seams as b


@pytest.fixture(params=sorted(b.PARSERS))
def polyloop_decision_parser(request):
    return b.PARSERS[request.param]()


@pytest.fixture(params=sorted(b.MODEL_CLIENTS))
def polyloop_model_client(request):
    return b.MODEL_CLIENTS[request.param]()


@pytest.fixture(params=sorted(b.FAILING_MODEL_CLIENTS))
def polyloop_model_client_failing(request):
    return b.FAILING_MODEL_CLIENTS[request.param]()


@pytest.fixture
def polyloop_action_executor():
    return ScriptedExecutor()


@pytest.fixture
def polyloop_action():
    return Action(text="print(1)", tool_call=None)


@pytest.fixture(params=sorted(b.FAILING_EXECUTORS))
def polyloop_action_executor_failing(request):
    return b.FAILING_EXECUTORS[request.param]()


@pytest.fixture(params=sorted(b.SINKS))
def polyloop_event_sink(request):
    return b.SINKS[request.param]()
"""


@pytest.fixture(scope="module")
def seams_run(tmp_path_factory: pytest.TempPathFactory) -> Result:
    project = tmp_path_factory.mktemp("broken-seams")
    (project / "pytest.ini").write_text(PYTEST_INI)
    (project / "conftest.py").write_text(CONFTEST)
    return run_contract(project, "--polyloop-contract", "-k", "not run_store")


def test_good_variants_pass(seams_run: Result) -> None:
    """The polyloop.testing seams every broken one derives from pass all their rules."""
    good = {k: v for k, v in seams_run.tests.items() if "[good" in k or "[" not in k}
    assert len(good) >= 25, seams_run.output[-3000:]
    assert (
        "passed"
        == good[
            "decision_parser::test_parse_is_synchronous_and_does_no_io[good_imports_lazily]"
        ].outcome
    )
    assert {} == {k: v.message[:400] for k, v in good.items() if v.outcome != "passed"}


@pytest.mark.parametrize("test", sorted(CAUGHT_BY))
def test_broken_seam_fails_the_rule_for_its_defect(seams_run: Result, test: str) -> None:
    """Each broken seam fails the expected rule, and the message names that rule."""
    seam, rule = CAUGHT_BY[test]
    assert test in seams_run.tests, seams_run.output[-3000:]
    outcome = seams_run.tests[test]
    assert "failed" == outcome.outcome, outcome.message[:2000]
    assert f"{seam} rule '{rule}'" in outcome.message, outcome.message[:2000]
