"""Encoding and decoding cost per record (µs), the part of a store's work that is not I/O.

    uv run python bench/serialization_bench.py [--quick]

Rows: a ``StepCompleted`` of a tool step (the record every step writes), an ``Intent``, a
``ModelCallResult``, and a ``RunFinished`` holding 1,000 steps (per step). Columns:
``dumps_log_record``; ``loads_log_record`` (standard-library JSON, what core alone does); and
``log_record_from_dict`` on an already parsed payload (what the durable stores call after
``orjson``). Each figure is the best of several repeats of a timed loop, so it reads as the
cost on a quiet machine; compare runs on the same machine only.
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable

from polyloop.serialization import dumps_log_record, loads_log_record, log_record_from_dict
from polyloop.types import (
    ActionOutcome,
    ActionStatus,
    Intent,
    IntentKind,
    ModelCallResult,
    ModelReply,
    ReplayPolicy,
    RunFinished,
    RunResult,
    StepCompleted,
    StepRecord,
    StopReason,
)


def _step(index: int) -> StepRecord:
    return StepRecord(
        step_idx=index,
        raw_output='CALL search {"query": "polyloop"}',
        content_chars=34,
        thinking_chars=120,
        action='CALL search {"query": "polyloop"}',
        parse_ok=True,
        parse_error=None,
        observation="3 documents found: a.txt, b.txt, c.txt",
        observation_is_synthetic=False,
        observation_truncated_chars=0,
        prompt_chars=4096 + 80 * index,
        call_id=f"chatcmpl-{index}",
        step_wall_ms=12,
        tool_name="search",
        tool_arguments='{"query":"polyloop"}',
        action_status=ActionStatus.EXECUTED,
    )


RECORDS: list[tuple[str, object, int]] = [
    (
        "StepCompleted",
        StepCompleted(
            "bench-run",
            "action-7",
            ActionOutcome(ActionStatus.EXECUTED, "3 documents found", False, False, 0),
            _step(7),
        ),
        1,
    ),
    ("Intent", Intent("bench-run", IntentKind.MODEL_CALL, 7, "model-7", ReplayPolicy.SAFE), 1),
    (
        "ModelCallResult",
        ModelCallResult(
            "bench-run",
            "model-7",
            ModelReply("chatcmpl-7", 'CALL search {"query": "polyloop"}', "thinking " * 13),
            None,
        ),
        1,
    ),
    (
        "RunFinished, 1,000 steps",
        RunFinished(
            "bench-run",
            RunResult(
                "bench-run", StopReason.AGENT_FINISHED, "done", tuple(_step(i) for i in range(1000))
            ),
        ),
        1000,
    ),
]


def best_us(function: Callable[[], object], per: int, budget: float) -> float:
    """Best µs per call of ``function`` (divided by ``per``) over repeats of ~``budget`` s."""
    timer = timeit.Timer(function)
    number, _ = timer.autorange()
    number = max(1, int(number * budget / 0.2))
    return min(timer.repeat(repeat=7, number=number)) / number / per * 1e6


def main(quick: bool) -> None:
    budget = 0.05 if quick else 0.2
    print("µs per record (per step for the RunFinished row); best of 7 repeats")
    header = f"  {'record':<26} {'dumps':>9} {'loads (json)':>13} {'from parsed':>12}"
    print(header)
    for name, record, per in RECORDS:
        line = dumps_log_record(record)  # type: ignore[arg-type]
        payload = json.loads(line)
        assert loads_log_record(line) == record
        encode = best_us(lambda: dumps_log_record(record), per, budget)  # type: ignore[arg-type]  # noqa: B023
        decode = best_us(lambda: loads_log_record(line), per, budget)  # noqa: B023
        parsed = best_us(lambda: log_record_from_dict(payload), per, budget)  # noqa: B023
        print(f"  {name:<26} {encode:>9.2f} {decode:>13.2f} {parsed:>12.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timed loops")
    main(parser.parse_args().quick)
