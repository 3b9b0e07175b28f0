"""A code agent on the container executor, on each sandbox backend.

    uv run python examples/code_agent_container.py                 # both backends
    uv run python examples/code_agent_container.py --backend docker

The model writes one Python block per reply; ``FirstCodeBlockParser`` keeps the first block
(and drops whatever the model wrote after it); ``ContainerExecutor`` runs it in one long-lived,
isolated, stateful Python session, so the second block can use the first block's variables.

- ``bubblewrap`` needs ``bwrap`` (Debian: ``apt-get install bubblewrap``).
- ``docker`` needs a running Docker Engine; the image ``polyloop-python:local`` is built from
  this machine's own Python on first use (``python -m polyloop.adapters.container build-image``).

The model is scripted so that the example runs offline. To use a real model, set
``POLYLOOP_GATEWAY_URL`` (an OpenAI-compatible ``/v1`` base URL) and ``POLYLOOP_MODEL``
(``POLYLOOP_API_KEY`` is sent as the bearer token when set).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from contextlib import AsyncExitStack

from polyloop.adapters.container import (
    BubblewrapBackend,
    ContainerExecutor,
    DockerBackend,
    FirstCodeBlockParser,
    Limits,
    SandboxBackend,
    ensure_docker_image,
)
from polyloop.ports import ModelClient
from polyloop.session import AgentDefinition, RunRequest, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import NullEventSink, ScriptedModelClient, reply
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

SCRIPT = [
    "First the Fibonacci numbers.\n```python\n"
    "fib = [0, 1]\nwhile len(fib) < 30:\n    fib.append(fib[-1] + fib[-2])\nprint(fib[-1])\n```\n"
    "This prints 999.",  # invented output: dropped from the history by the parser
    "Now the even ones among them, using `fib` from before.\n```python\n"
    "sum(x for x in fib if x % 2 == 0)\n```",
    "FINAL ANSWER: the even Fibonacci numbers among the first 30 sum to 257114.",
]


async def solve(backend: SandboxBackend, model: ModelClient) -> tuple[RunResult, dict[str, str]]:
    async with ContainerExecutor(
        backend, limits=Limits(memory_mb=256, max_processes=32), time_limit_seconds=10
    ) as executor:
        definition = AgentDefinition(
            model_client=model,
            decision_parser=FirstCodeBlockParser(),
            store=MemoryRunStore(),
            event_sink=NullEventSink(),
            synthetic_observations=SyntheticObservations(
                action_rejected="That action was rejected.",
                env_failed="The Python session died; the run stops.",
                model_call_failed="The model call failed.",
            ),
        )
        request = RunRequest(
            run_id=f"fibonacci-{backend.name}",
            budget=Budget(
                max_steps=8,
                max_actions=6,
                max_consecutive_parse_failures=2,
                max_prompt_chars=40_000,
            ),
            action_executor=executor,
            tools=ToolRegistry(),
            context=Context(
                run_level=(
                    Message(
                        Role.SYSTEM,
                        (
                            TextBlock(
                                "You solve tasks by writing Python. Reply with exactly one "
                                "```python block per turn; you will see its output. When you "
                                "know the answer, reply: FINAL ANSWER: <answer>"
                            ),
                        ),
                    ),
                ),
                goal_level=(
                    Message(
                        Role.USER,
                        (
                            TextBlock(
                                "What is the sum of the even numbers among the first 30 "
                                "Fibonacci numbers (starting 0, 1)?"
                            ),
                        ),
                    ),
                ),
            ),
            injections={},
            model_binding={},
            model_replay_policy=ReplayPolicy.SAFE,
            observation_template="Output:\n{observation}",
            tool_section_template="",
            cancel_grace_seconds=2.0,
        )
        return await run(definition, request), dict(executor.parameters())


async def main(backends: list[str]) -> None:
    for name in backends:
        async with AsyncExitStack() as stack:
            model: ModelClient
            if os.environ.get("POLYLOOP_GATEWAY_URL"):
                from polyloop.adapters.gateway import GatewayModelClient

                model = await stack.enter_async_context(
                    GatewayModelClient(
                        os.environ["POLYLOOP_GATEWAY_URL"],
                        os.environ.get("POLYLOOP_MODEL", "default"),
                        api_key=os.environ.get("POLYLOOP_API_KEY"),
                        temperature=0.0,
                    )
                )
            else:
                model = ScriptedModelClient([reply(text) for text in SCRIPT])
            backend: SandboxBackend
            if name == "docker":
                await ensure_docker_image()
                backend = DockerBackend()
            else:
                backend = BubblewrapBackend()
            result, parameters = await solve(backend, model)
        print(f"=== {name}: session {parameters['session_id']} image {parameters['image']}")
        for step in result.steps:
            print(f"step {step.step_idx} [{step.action_status or 'no action'}]")
            print(
                f"  code/answer: {step.raw_output.splitlines()[-2] if step.action else step.raw_output}"
            )
            print(f"  observation: {step.observation.strip()!r}")
        print(f"stop: {result.stop_reason.value}; answer: {result.final_answer}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["bubblewrap", "docker"], action="append")
    args = parser.parse_args()
    asyncio.run(main(args.backend or ["bubblewrap", "docker"]))
