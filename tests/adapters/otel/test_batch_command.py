"""``polyloop batch --otlp URL`` as a user runs it: the real command, a real SQLite store, and a
real OTLP/HTTP metrics receiver on loopback that decodes what it is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.adapters.otel._receiver import metrics_receiver
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
