"""A fork of a run whose code wrote files in the sandbox, on a real sandbox (design 0072): a
fresh executor's session is brought to the fork step by executing the prefix's code again, so
the new agent's code at step K sees the files; without replay it sees an empty scratch."""

from __future__ import annotations

import pytest

from polyloop.adapters.container import ContainerExecutor, FirstCodeBlockParser
from polyloop.errors import ConfigurationError
from polyloop.ports import RunLog, supports_prefix_replay
from polyloop.session import AgentDefinition, fork, run
from polyloop.stores.memory import MemoryRunStore
from polyloop.testing import RecordingEventSink, ScriptedModelClient, reply
from polyloop.types import ActionStatus, RunResult, StopReason
from polyloop_cli.commands.lineage import fork_environment, fork_json
from tests.adapters.container.conftest import ExecutorFactory
from tests.adapters.container.test_governed_run import SYNTHETIC, request

WRITE = "First a file.\n```python\nopen('notes.txt', 'w').write('first\\n')\n```"
APPEND = "Then more.\n```python\nwith open('notes.txt', 'a') as f:\n    f.write('second\\n')\n```"
PRINT_COUNTER = "A variable too.\n```python\ncounter = 41\nprint('set')\n```"
READ = "What is there?\n```python\nprint(open('notes.txt').read() + str(counter + 1))\n```"


def _definition(store: MemoryRunStore, *replies: object) -> AgentDefinition:
    return AgentDefinition(
        model_client=ScriptedModelClient(list(replies), by_call_index=True),  # type: ignore[arg-type]
        decision_parser=FirstCodeBlockParser(),
        store=store,
        event_sink=RecordingEventSink(),
        synthetic_observations=SYNTHETIC,
    )


async def _source(store: MemoryRunStore, executor: ContainerExecutor) -> RunResult:
    """Steps 0-2 write a file, append to it and set a variable; step 3 answers."""
    script = [reply(WRITE), reply(APPEND), reply(PRINT_COUNTER), reply("FINAL ANSWER: done")]
    result = await run(_definition(store, *script), request("source", executor))
    assert StopReason.AGENT_FINISHED is result.stop_reason
    assert all(s.action_status is ActionStatus.EXECUTED for s in result.steps[:3])
    return result


def _new_agent(store: MemoryRunStore) -> AgentDefinition:
    """Answers only calls 3 and 4: a call for a step of the prefix fails the test."""
    wrong = RuntimeError("the fork called the model for a step of its prefix")
    return _definition(store, wrong, wrong, wrong, reply(READ), reply("FINAL ANSWER: read"))


@pytest.mark.slow
async def test_a_fork_s_fresh_session_sees_the_files_its_prefix_wrote(
    make_executor: ExecutorFactory,
) -> None:
    store = MemoryRunStore()
    source_executor = await make_executor()
    await _source(store, source_executor)
    assert supports_prefix_replay(source_executor)
    assert not source_executor.can_replay_prefix()  # actions ran in it

    fresh = await make_executor()
    assert fresh.can_replay_prefix()
    result = await fork(
        _new_agent(store), request("forked", fresh), source_run_id="source", at_step=3
    )
    assert isinstance(result, RunResult)
    assert StopReason.AGENT_FINISHED is result.stop_reason
    assert "first\nsecond\n42\n" == result.steps[3].observation
    log = await store.read_log("forked")
    assert log.started is not None
    assert log.started.fork_replayed_prefix
    described = fork_json(log)
    assert described is not None
    assert ("replayed_prefix", [0, 1, 2]) == (
        described["environment"],
        described["replayed_steps"],
    )
    assert "steps 0, 1, 2" in fork_environment(log)
    # the copied prefix is the source's, observations included (nothing was recorded again)
    source = await store.read_log("source")
    assert [s.step for s in source.steps[:3]] == [s.step for s in log.steps[:3]]


@pytest.mark.slow
async def test_without_replay_the_fork_goes_on_against_the_session_as_it_is(
    make_executor: ExecutorFactory,
) -> None:
    store = MemoryRunStore()
    await _source(store, await make_executor())
    fresh = await make_executor()
    result = await fork(
        _new_agent(store),
        request("as-is", fresh),
        source_run_id="source",
        at_step=3,
        replay_prefix=False,
    )
    assert isinstance(result, RunResult)
    assert "FileNotFoundError" in result.steps[3].observation
    log = await store.read_log("as-is")
    assert log.started is not None
    assert not log.started.fork_replayed_prefix
    described = fork_json(log)
    assert described is not None
    assert ("world_as_is", []) == (described["environment"], described["replayed_steps"])
    assert fork_environment(log).startswith("the world as it is")


@pytest.mark.slow
async def test_replay_is_refused_for_a_used_session_and_nothing_is_written(
    make_executor: ExecutorFactory,
) -> None:
    store = MemoryRunStore()
    used = await make_executor()
    await _source(store, used)
    with pytest.raises(ConfigurationError, match="already ran"):
        await fork(
            _new_agent(store),
            request("refused", used),
            source_run_id="source",
            at_step=3,
            replay_prefix=True,
        )
    assert RunLog() == await store.read_log("refused")
    # by default a used session is not replayed into: the fork goes on against it as it is
    result = await fork(_new_agent(store), request("used", used), source_run_id="source", at_step=3)
    assert isinstance(result, RunResult)
    assert "first\nsecond\n42\n" == result.steps[3].observation  # the source's own session
    log = await store.read_log("used")
    assert log.started is not None
    assert not log.started.fork_replayed_prefix
