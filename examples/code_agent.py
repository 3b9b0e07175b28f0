"""A dissect-style code agent: the model writes one Python block per step, no tools.

- Actions are tool-less: :class:`~polyloop.ports.Action` with ``tool_call=None`` whose text is
  the code, executed by the container executor (``polyloop.adapters.container``): one
  long-lived, sandboxed, stateful Python session (variables survive from step to step).
- The parser (``FirstCodeBlockParser``, from the same adapter) keeps only the first code block
  and drops everything after it from the history: models like to invent the output of their
  own code, and the next prompt must show the real observation, not the invented one.
- The model is scripted, so this runs offline.

Run: ``uv run python examples/code_agent.py [--executor auto|container|subprocess]``.
``auto`` uses the container executor when bubblewrap can make a sandbox here, else it falls
back to :class:`polyloop.testing.ScriptedExecutor` running each cell in a plain ``python``
subprocess (not isolated; earlier cells are re-run silently so that state carries over).
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from contextlib import AsyncExitStack

from polyloop.adapters.container import FirstCodeBlockParser
from polyloop.ports import ActionExecutor
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import RecordingEventSink, ScriptedExecutor, ScriptedModelClient, reply
from polyloop.tools import ToolRegistry
from polyloop.types import (
    Budget,
    Context,
    Message,
    ReplayPolicy,
    Role,
    RunResult,
    SyntheticObservations,
    TextBlock,
)

SCRIPT = (
    # The model invents the output after its block ("14"); the parser drops it from history.
    "Let me count the primes below 50 first.\n"
    "```python\n"
    "primes = [n for n in range(2, 50) if all(n % d for d in range(2, n))]\n"
    "print(len(primes))\n"
    "```\n"
    "Output:\n```\n14\n```\n",
    # Uses `primes` from the previous cell: the session is stateful.
    "Now their sum.\n```python\nprint(sum(primes))\n```",
    "FINAL ANSWER: there are 15 primes below 50 and they sum to 328.",
)


class SubprocessCells:
    """Fallback executor body: runs each cell with ``python -c``; earlier cells that ran
    without error are re-run first with their output discarded, so state carries over."""

    def __init__(self) -> None:
        self.cells: list[str] = []

    def __call__(self, code: str) -> str:
        prelude = "".join(
            "import contextlib as _c, io as _io\n"
            f"with _c.redirect_stdout(_io.StringIO()): exec({cell!r})\n"
            for cell in self.cells
        )
        completed = subprocess.run(
            [sys.executable, "-c", prelude + code],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if completed.returncode == 0:
            self.cells.append(code)
        return completed.stdout + completed.stderr


async def open_executor(choice: str, stack: AsyncExitStack) -> tuple[ActionExecutor, str]:
    """The container executor when available (or required), else the subprocess fallback."""
    if choice in ("auto", "container"):
        from polyloop.adapters.container import (
            BackendUnavailableError,
            BubblewrapBackend,
            ContainerExecutor,
        )

        executor = ContainerExecutor(BubblewrapBackend(), time_limit_seconds=10)
        try:
            await stack.enter_async_context(executor)
        except BackendUnavailableError as error:
            if choice == "container":
                raise
            print(f"(container executor unavailable: {error}; using a subprocess)")
        else:
            return executor, "container"
    return ScriptedExecutor(SubprocessCells(), name="subprocess-cells"), "subprocess"


async def main(choice: str = "auto") -> tuple[RunResult, str]:
    async with AsyncExitStack() as stack:
        executor, kind = await open_executor(choice, stack)
        definition = AgentDefinition(
            model_client=ScriptedModelClient([reply(text) for text in SCRIPT], name="code-agent"),
            decision_parser=FirstCodeBlockParser(),
            store=MemoryRunStore(),
            event_sink=RecordingEventSink(),
            synthetic_observations=SyntheticObservations(
                action_rejected="That action was rejected.",
                env_failed="The Python session died; the run stops.",
                model_call_failed="The model call failed.",
            ),
        )
        request = RunRequest(
            run_id="code-agent-primes",
            budget=Budget(
                max_steps=6,
                max_actions=4,
                max_consecutive_parse_failures=2,
                max_prompt_chars=20_000,
            ),
            action_executor=executor,
            tools=ToolRegistry(),  # tool-less: every action is code
            context=Context(
                run_level=(
                    Message(
                        Role.SYSTEM,
                        (
                            TextBlock(
                                "Write one ```python block per reply; when done, reply "
                                "FINAL ANSWER: <answer>."
                            ),
                        ),
                    ),
                ),
                goal_level=(
                    Message(
                        Role.USER, (TextBlock("How many primes are below 50, and their sum?"),)
                    ),
                ),
            ),
            injections={},
            model_binding={"episode": "primes-0"},
            model_replay_policy=ReplayPolicy.SAFE,
            observation_template="Output:\n{observation}",
            tool_section_template="",
            cancel_grace_seconds=2.0,
        )
        return await run(definition, request), kind


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=("auto", "container", "subprocess"), default="auto")
    result, kind = asyncio.run(main(parser.parse_args().executor))
    print(f"executor: {kind}")
    for step in result.steps:
        print(f"--- step {step.step_idx} ({step.action_status or 'no action'})")
        print(f"history: {step.raw_output!r}")
        print(f"observation: {step.observation!r}")
    print(result.stop_reason.value, "|", result.final_answer)
