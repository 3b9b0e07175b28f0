"""``polyloop batch --otlp URL`` as a user runs it: the real command, a real SQLite store, and a
real OTLP/HTTP receiver on loopback that decodes what it is sent (metrics and traces), or Phoenix
(traces)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from polyloop.adapters.otel import run_trace_id
from tests.adapters.otel._receiver import metrics_receiver
from tests.adapters.otel.test_phoenix import _spans, _wait_for
from tests.batch._kit import batch_args, batch_env, episodes_of, write_episodes
from tests.cli._kit import assert_one_line_error, polyloop

#: A real command in a subprocess (an interpreter start, a batch, a metrics export).
pytestmark = pytest.mark.slow


def test_a_batch_sends_its_episodes_steps_and_rate_to_the_collector(tmp_path: Path) -> None:
    """Three episodes that finish and one whose factory raises: the receiver gets the episodes
    by outcome (done 3, failed 1), the steps driven and the steps-per-second gauge, from the
    service polyloop-batch, named after the episodes file."""
    episodes = write_episodes(
        tmp_path / "nightly.jsonl",
        [*episodes_of(3, steps=2), {"run_id": "bad", "factory": "raises"}],
    )
    with metrics_receiver() as (receiver, url):
        done = polyloop(
            *batch_args(episodes, tmp_path / "runs.sqlite", "--otlp", url),
            env=batch_env(tmp_path / "home"),
            cwd=tmp_path,
        )
        assert 20 == done.code, done.stderr  # incomplete: one episode failed
        assert {"polyloop-batch"} == receiver.services
        by_outcome = {
            dict(key)["polyloop.batch.outcome"]: value
            for key, value in receiver.last("polyloop.batch.episodes").items()
        }
        assert {"done": 3.0, "failed": 1.0} == by_outcome
        for key in receiver.last("polyloop.batch.episodes"):
            assert "nightly" == dict(key)["polyloop.batch.name"]
        assert {(("polyloop.batch.name", "nightly"),): 9.0} == receiver.last("polyloop.batch.steps")
        ((rate_key, rate),) = receiver.last("polyloop.batch.steps_per_second").items()
        assert (("polyloop.batch.name", "nightly"),) == rate_key
        assert 0 < rate
        # The episodes' traces too: each run's invocation in the trace of its run id.
        invocations = {trace for name, trace in receiver.spans if name == "invoke_agent polyloop"}
        assert {f"{run_trace_id(f'ep-{k:04d}'):032x}" for k in range(3)} == invocations


def test_a_batch_sends_its_episodes_traces_to_phoenix_and_reruns_with_or_without_otlp(
    tmp_path: Path, phoenix_url: str
) -> None:
    """Episodes run without --otlp, then a new batch file's episodes with it: Phoenix gets each
    new run as a root invocation with its model calls and actions. Rerunning the first batch
    with --otlp (and the second without) counts every run as recorded: the telemetry does not
    change a run's parameter snapshot."""
    tag = f"{time.time_ns()}"
    store = tmp_path / "runs.sqlite"
    env = batch_env(tmp_path / "home")
    plain = write_episodes(tmp_path / "plain.jsonl", episodes_of(2, f"plain-{tag}", steps=2))
    traced = write_episodes(tmp_path / "traced.jsonl", episodes_of(2, f"otel-{tag}", steps=2))
    assert 0 == polyloop(*batch_args(plain, store), env=env, cwd=tmp_path).code
    done = polyloop(*batch_args(traced, store, "--otlp", phoenix_url), env=env, cwd=tmp_path)
    assert 0 == done.code, done.stderr
    for k in range(2):
        run_id = f"otel-{tag}-{k:04d}"
        spans = _wait_for(phoenix_url, run_id, lambda s: len(s) >= 5)
        names = sorted(s["name"] for s in spans)
        assert ["chat", "chat", "chat", "invoke_agent polyloop"] == [
            n for n in names if not n.startswith("execute_tool")
        ]
        assert 2 == sum(1 for n in names if n.startswith("execute_tool"))
        roots = _spans(phoenix_url, run_id, roots_only=True)
        assert ["invoke_agent polyloop"] == [s["name"] for s in roots]
    assert [] == _spans(phoenix_url, f"plain-{tag}-0000")
    for episodes, extra in ((plain, ("--otlp", phoenix_url)), (traced, ())):
        again = polyloop(*batch_args(episodes, store, *extra, "--json"), env=env, cwd=tmp_path)
        assert 0 == again.code, again.stderr
        counted = {k: v for k, v in again.json()["by_status"].items() if v}
        assert {"recorded": 2} == counted


def test_a_bad_otlp_url_is_one_error_saying_what_to_pass(tmp_path: Path) -> None:
    """A URL that is not http(s) stops the command before anything starts, naming the form."""
    episodes = write_episodes(tmp_path / "eps.jsonl", episodes_of(1))
    done = polyloop(
        *batch_args(episodes, tmp_path / "runs.sqlite", "--otlp", "grpc://u:pw@collector:4317"),
        env=batch_env(tmp_path / "home"),
        cwd=tmp_path,
    )
    assert_one_line_error(done, 2)
    assert "OTLP/HTTP" in done.stderr
    assert "pw" not in done.stderr
    assert not (tmp_path / "runs.sqlite").exists()
