"""The session's behaviour: state, output, errors, time limit, output cap, death."""

from __future__ import annotations

import asyncio

import pytest

from polyloop.adapters.container import ContainerError, ContainerExecutor, SessionDeadError
from polyloop.ports import Action, ToolCall
from polyloop.types import ActionStatus
from tests.adapters.container.conftest import (
    ExecutorFactory,
    processes_of,
    run_code,
    wait_until_gone,
)


@pytest.mark.slow
async def test_state_persists_between_actions(executor: ContainerExecutor) -> None:
    """Names, imports and functions defined by one action are there in the next."""
    first = await run_code(executor, "import math\ntotal = 40\ndef bump(x):\n    return x + 2\n")
    second = await run_code(executor, "print(bump(total), math.floor(2.5))")
    assert first.status is ActionStatus.EXECUTED
    assert first.observation == ""
    assert second.status is ActionStatus.EXECUTED
    assert second.observation == "42 2\n"
    assert second.observation_is_synthetic is False
    assert second.env_reported_completion is False


@pytest.mark.slow
async def test_files_in_scratch_persist(executor: ContainerExecutor) -> None:
    """Files written in the working directory /scratch persist between actions."""
    await run_code(executor, "open('notes.txt', 'w').write('kept')")
    outcome = await run_code(executor, "import os\nprint(os.getcwd(), open('notes.txt').read())")
    assert outcome.observation == "/scratch kept\n"


@pytest.mark.slow
async def test_stdout_and_stderr_are_captured_in_order(executor: ContainerExecutor) -> None:
    """stdout and stderr of the code and its subprocesses form one observation, in order."""
    code = (
        "import sys, os, subprocess\n"
        "print('one')\n"
        "print('two', file=sys.stderr)\n"
        "os.write(1, b'three\\n')\n"
        "subprocess.run(['sh', '-c', 'echo four; echo five >&2'])\n"
        "print('six')\n"
    )
    outcome = await run_code(executor, code)
    assert outcome.observation == "one\ntwo\nthree\nfour\nfive\nsix\n"


@pytest.mark.slow
async def test_last_expression_is_shown_like_a_notebook_cell(executor: ContainerExecutor) -> None:
    """The value of a final expression is shown, as in a notebook cell; None is not."""
    outcome = await run_code(executor, "x = [1, 2]\nx + [3]")
    assert outcome.observation == "[1, 2, 3]\n"
    silent = await run_code(executor, "None")
    assert silent.observation == ""


@pytest.mark.slow
async def test_exception_is_an_executed_observation_with_traceback(
    executor: ContainerExecutor,
) -> None:
    """An exception is an EXECUTED observation with the action's own traceback (no driver frames),
    and the session survives."""
    outcome = await run_code(executor, "print('before')\nvalue = {}['missing']\n")
    assert outcome.status is ActionStatus.EXECUTED
    assert outcome.observation.startswith("before\nTraceback (most recent call last):\n")
    assert 'File "<action-1>", line 2, in <module>' in outcome.observation
    assert "value = {}['missing']" in outcome.observation
    assert outcome.observation.rstrip().endswith("KeyError: 'missing'")
    # The driver's own frames are not shown to the model.
    assert "<string>" not in outcome.observation
    # The session survives the exception.
    after = await run_code(executor, "print('still here')")
    assert after.observation == "still here\n"


@pytest.mark.slow
async def test_syntax_error_and_system_exit_are_observations(executor: ContainerExecutor) -> None:
    """A SyntaxError and a sys.exit are observations of executed actions, and the session survives."""
    syntax = await run_code(executor, "def broken(:\n    pass")
    assert syntax.status is ActionStatus.EXECUTED
    assert "SyntaxError" in syntax.observation
    leaving = await run_code(executor, "import sys\nsys.exit(3)")
    assert leaving.status is ActionStatus.EXECUTED
    assert "SystemExit: 3" in leaving.observation
    assert (await run_code(executor, "print(1 + 1)")).observation == "2\n"


@pytest.mark.slow
async def test_input_reads_nothing_and_cannot_touch_the_protocol(
    executor: ContainerExecutor,
) -> None:
    """stdin reads nothing, and closing stdout and stderr inside an action does not break the
    driver's protocol."""
    outcome = await run_code(executor, "import sys\nprint(repr(sys.stdin.read()))\ninput()")
    assert outcome.observation.startswith("''\nTraceback")
    assert "EOFError" in outcome.observation
    closed = await run_code(executor, "import os\nos.close(1)\nos.close(2)")
    assert closed.status is ActionStatus.EXECUTED
    assert (await run_code(executor, "import sys; print('ok', file=sys.stderr)")).observation == (
        "ok\n"
    )


@pytest.mark.slow
async def test_output_cap_cuts_and_counts(make_executor: ExecutorFactory) -> None:
    """Output beyond max_output_chars is cut, the cut characters counted and said; output within the
    cap is kept whole."""
    executor = await make_executor(max_output_chars=1000)
    outcome = await run_code(executor, "print('é' * 5000)")
    assert outcome.status is ActionStatus.EXECUTED
    assert len(outcome.observation) <= 1000
    assert outcome.observation.startswith("é" * 900)
    shown = outcome.observation.count("é")
    # 5000 characters and a newline were produced; the ones not shown are counted.
    assert outcome.observation_truncated_chars == 5001 - shown
    assert f"{outcome.observation_truncated_chars} more characters" in outcome.observation
    small = await run_code(executor, "print('x' * 1000)")
    assert small.observation_truncated_chars > 0
    assert len(small.observation) <= 1000
    assert small.observation.count("x") + small.observation_truncated_chars == 1001
    exact = await run_code(executor, "print('x' * 999)")
    assert exact.observation == "x" * 999 + "\n"
    assert exact.observation_truncated_chars == 0


@pytest.mark.slow
async def test_huge_output_does_not_exhaust_the_sandbox(make_executor: ExecutorFactory) -> None:
    """50 MB of output is counted, not kept, and the session stays usable."""
    executor = await make_executor(max_output_chars=100, time_limit_seconds=20.0)
    outcome = await run_code(executor, "for _ in range(5000):\n    print('y' * 10000)")
    assert outcome.status is ActionStatus.EXECUTED
    assert outcome.observation_truncated_chars == 5000 * 10001 - outcome.observation.count("y")
    assert (await run_code(executor, "print('alive')")).observation == "alive\n"


@pytest.mark.slow
async def test_time_limit_interrupts_and_the_session_survives(
    make_executor: ExecutorFactory,
) -> None:
    """Past the time limit the action gets a KeyboardInterrupt and the session keeps its state."""
    executor = await make_executor(time_limit_seconds=1.0)
    await run_code(executor, "progress = 0")
    outcome = await run_code(
        executor, "import time\nwhile True:\n    progress += 1\n    time.sleep(0.01)"
    )
    assert outcome.status is ActionStatus.EXECUTED
    assert "KeyboardInterrupt" in outcome.observation
    assert "time limit of 1 s" in outcome.observation
    after = await run_code(executor, "print(progress > 0)")
    assert after.observation == "True\n"
    blocked = await run_code(executor, "import time\ntime.sleep(60)")
    assert "KeyboardInterrupt" in blocked.observation
    assert executor.alive


@pytest.mark.slow
async def test_code_that_refuses_to_die_gets_the_sandbox_killed(
    make_executor: ExecutorFactory,
) -> None:
    """Code ignoring the interrupt gets the whole sandbox killed (ENV_ERROR, synthetic), forked
    children included; the session is dead afterwards."""
    executor = await make_executor(time_limit_seconds=1.0, interrupt_grace_seconds=1.0)
    session_id = executor.session_id
    code = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "if os.fork() == 0:\n"
        "    while True:\n"
        "        time.sleep(0.05)\n"
        "while True:\n"
        "    pass\n"
    )
    outcome = await run_code(executor, code)
    assert outcome.status is ActionStatus.ENV_ERROR
    assert outcome.observation_is_synthetic is True
    assert "killed" in outcome.observation
    assert not executor.alive
    # Everything inside stopped, the forked child included, not only the client process.
    assert await wait_until_gone(session_id) == []
    with pytest.raises(SessionDeadError, match="dead"):
        await run_code(executor, "print('never')")


@pytest.mark.slow
async def test_interpreter_exit_is_an_environment_failure(executor: ContainerExecutor) -> None:
    """An interpreter that exits during an action is SessionDeadError, then and afterwards."""
    with pytest.raises(SessionDeadError, match="died while running action 1"):
        await run_code(executor, "import os\nos._exit(0)")
    with pytest.raises(SessionDeadError):
        await run_code(executor, "print(1)")


@pytest.mark.slow
async def test_tool_calls_are_refused(executor: ContainerExecutor) -> None:
    """A tool call given to the code executor is refused with ContainerError."""
    with pytest.raises(ContainerError, match="runs code, not tool calls"):
        await executor.execute(Action(text="x", tool_call=ToolCall("search", {})))


async def test_execute_without_a_session_raises() -> None:
    """execute before the session is started raises SessionDeadError pointing at async with."""
    from polyloop.adapters.container import BubblewrapBackend

    executor = ContainerExecutor(BubblewrapBackend())
    with pytest.raises(SessionDeadError, match="async with"):
        await run_code(executor, "1")


@pytest.mark.slow
async def test_concurrent_executes_run_one_after_another(executor: ContainerExecutor) -> None:
    """Concurrent executes on one session run one after another, each seeing the previous ones."""
    await run_code(executor, "log = []")
    outcomes = await asyncio.gather(
        *(run_code(executor, f"log.append({i})\nprint(len(log))") for i in range(5))
    )
    assert sorted(o.observation for o in outcomes) == [f"{n}\n" for n in range(1, 6)]
    assert processes_of(executor.session_id) != []
