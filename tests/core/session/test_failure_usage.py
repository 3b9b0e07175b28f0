"""What a failed model call still cost (design 0065): the loop stores the error's ``usage`` in
``ModelCallResult.failure_usage``, optional on read, and no model SDK is imported by core."""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Mapping

import pytest

from polyloop.errors import ConfigurationError
from polyloop.ports import ModelCall
from polyloop.serialization import dumps, from_dict, loads, to_dict
from polyloop.session import run
from polyloop.stores.memory import MemoryRunStore
from polyloop.types import (
    REQUESTS_USAGE_KEY,
    RETRIES_USAGE_KEY,
    ModelCallResult,
    ModelReply,
    StopReason,
    model_call_counts,
)
from tests.loop_kit import make_definition, make_request


class CostlyFailure(Exception):
    def __init__(self, usage: object) -> None:
        super().__init__("the provider is down")
        self.usage = usage


class FailingClient:
    def __init__(self, usage: object) -> None:
        self.usage = usage

    def parameters(self) -> Mapping[str, str]:
        return {"kind": "failing"}

    async def call(self, call: ModelCall) -> ModelReply:
        raise CostlyFailure(self.usage)


async def _failed_result(usage: object) -> ModelCallResult:
    store = MemoryRunStore()
    definition = make_definition([], store)
    definition = type(definition)(
        FailingClient(usage),  # type: ignore[arg-type]
        definition.decision_parser,
        store,
        definition.event_sink,
        definition.synthetic_observations,
    )
    result = await run(definition, make_request("costly"))
    assert result.stop_reason is StopReason.LLM_ERROR
    (recorded,) = (await store.read_log("costly")).model_results
    return recorded


async def test_the_errors_usage_is_recorded_with_the_failure() -> None:
    counts = {REQUESTS_USAGE_KEY: 4, RETRIES_USAGE_KEY: 3}
    recorded = await _failed_result(counts)
    assert recorded.failure == "CostlyFailure: the provider is down"
    assert dict(recorded.failure_usage or {}) == counts
    assert model_call_counts(recorded) == (4, 3)


@pytest.mark.parametrize("usage", [None, {}, {"requests": -1}, {"requests": True}, {1: 2}, "3"])
async def test_a_malformed_usage_is_left_out_never_a_reason_to_fail(usage: object) -> None:
    recorded = await _failed_result(usage)
    assert recorded.failure_usage is None
    assert model_call_counts(recorded) == (1, 0)


def test_failure_usage_is_omitted_at_its_default_and_read_back_when_present() -> None:
    plain = ModelCallResult("r", "model-0", None, "X: y")
    assert "failure_usage" not in to_dict(plain)
    assert loads(ModelCallResult, dumps(plain)) == plain
    costly = ModelCallResult("r", "model-0", None, "X: y", {REQUESTS_USAGE_KEY: 2})
    assert to_dict(costly)["failure_usage"] == {REQUESTS_USAGE_KEY: 2}
    assert from_dict(ModelCallResult, to_dict(costly)) == costly
    assert pickle.loads(pickle.dumps(costly)) == costly


def test_failure_usage_belongs_to_failures_only() -> None:
    with pytest.raises(ConfigurationError, match="failure_usage is set on a call with a reply"):
        ModelCallResult("r", "model-0", ModelReply(None, "", ""), None, {REQUESTS_USAGE_KEY: 1})
    with pytest.raises(ConfigurationError, match="must be >= 0"):
        ModelCallResult("r", "model-0", None, "X: y", {REQUESTS_USAGE_KEY: -1})


def test_a_reply_without_counts_made_one_request() -> None:
    result = ModelCallResult(
        "r", "model-0", ModelReply(None, "", "", usage={"total_tokens": 9}), None
    )
    assert model_call_counts(result) == (1, 0)


def test_importing_the_loop_imports_no_model_sdk() -> None:
    """polyloop-core stays free of openai, LiteLLM and httpx (import-linter checks the code;
    this checks what an import really loads)."""
    probe = (
        "import sys, polyloop.session, polyloop.types, polyloop.testing\n"
        "print(sorted(m for m in ('openai', 'litellm', 'httpx') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]"
