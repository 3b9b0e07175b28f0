"""The worked examples run offline, as a newcomer would run them, and do what they say."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from polyloop.types import ActionStatus, StopReason

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_script(name: str, *args: str) -> str:
    completed = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert completed.returncode == 0, completed.stderr
    assert "Traceback" not in completed.stderr
    return completed.stdout


def test_quickstart_runs_as_a_script() -> None:
    """The quick-start example runs as a script and prints its first step and final answer."""
    out = run_script("quickstart")
    assert out.splitlines()[0] == '0 CALL add {"a": 2, "b": 3} -> 5'
    assert out.splitlines()[-1] == "agent_finished 2 + 3 = 5"


def test_quickstart_is_about_twenty_lines_of_code() -> None:
    """The quick-start example stays within 26 lines of code."""
    source = (EXAMPLES / "quickstart.py").read_text()
    body = source.split('"""', 2)[2]
    code = [line for line in body.splitlines() if line.strip() and not line.startswith("#")]
    assert len(code) <= 26


@pytest.mark.parametrize("executor", ["auto", "subprocess"])
async def test_code_agent(executor: str) -> None:
    """The code agent example runs its first code block only, carries state between steps, and
    finishes with the right answer on either executor."""
    module = load("code_agent")
    result, kind = await module.main(executor)
    assert kind in (("container", "subprocess") if executor == "auto" else ("subprocess",))
    assert result.stop_reason is StopReason.AGENT_FINISHED
    assert result.final_answer == "there are 15 primes below 50 and they sum to 328."
    first, second, last = result.steps
    # Only the first code block is the action; the invented output after it left the history.
    assert first.action.startswith("primes = ")
    assert first.raw_output.endswith("print(len(primes))\n```")
    assert "14" not in first.raw_output
    assert first.observation.strip() == "15"
    # State carried over from step 0 to step 1.
    assert second.observation.strip() == "328"
    assert first.tool_name is None
    assert first.action_status is ActionStatus.EXECUTED
    assert last.action is None


def test_code_agent_uses_the_container_executor_when_bubblewrap_works() -> None:
    """The code agent example uses the container executor where bubblewrap works, else the
    subprocess one, and says which."""
    import shutil

    out = run_script("code_agent")
    expected = "container" if shutil.which("bwrap") and "unavailable" not in out else "subprocess"
    assert f"executor: {expected}" in out
    assert out.splitlines()[-1].startswith("agent_finished")


async def test_govdoc_agent_three_narrowing_phases() -> None:
    """The govdoc example's three phases narrow their tool sets, the last one refuses a drafting
    tool as not_executed, and the document is published."""
    module = load("govdoc_agent")
    results, workspace = await module.main()
    assert list(results) == ["research", "drafting", "approval"]
    sizes = [len(module.PHASES[phase]) for phase in results]
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[0] > sizes[-1]
    for phase, result in results.items():
        assert result.stop_reason is StopReason.TASK_COMPLETED, phase
        executed = [s.tool_name for s in result.steps if s.action_status is ActionStatus.EXECUTED]
        assert set(executed) <= set(module.PHASES[phase])
    # Phase 3 tried a drafting tool: the restricted registry rejected it.
    rejected = results["approval"].steps[0]
    assert rejected.tool_name == "write_section"
    assert rejected.action_status is ActionStatus.NOT_EXECUTED
    assert rejected.observation_is_synthetic
    assert results["approval"].steps[-1].tool_name == "publish_document"
    assert workspace.published == ["Street market permits: what to file"]
    assert len(workspace.sections) == 2


def test_govdoc_agent_runs_as_a_script() -> None:
    """The govdoc example runs as a script: three completed phases and one refused call."""
    out = run_script("govdoc_agent")
    assert out.count("task_completed") == 3
    assert "[not_executed]" in out
