"""Reading a run-log file decides exactly as a plain line-by-line reader would.

``parse_log`` decodes the whole file at once and ``scan_tail`` looks only for what a writer
needs; both are checked here against straightforward references on files mixing good records,
records of another run, records written twice or out of the loop's order, garbage, lines that
are not UTF-8 and torn tails.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import CorruptLogError, SerializationError
from polyloop.ports import RunLog
from polyloop.recovery import WriteOrderCheck
from polyloop.serialization import dumps_log_record, loads_log_record
from polyloop.stores._jsonl_format import parse_log, scan_tail
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted
from tests.strategies import log_records


def _key(record: Any) -> tuple[object, ...]:
    """What a log holds at most once, and how the refusal names it."""
    if isinstance(record, Intent):
        return ("intent", record.kind.value, record.result_id)
    if isinstance(record, ModelCallResult):
        return ("result", record.result_id)
    if isinstance(record, StepCompleted):
        return ("step", record.step.step_idx)
    return (type(record).__name__,)


def _named(key: tuple[object, ...]) -> str:
    if key[0] == "intent":
        return f"{key[1]} intent"
    return {"result": "ModelCallResult", "step": "StepCompleted"}.get(str(key[0]), str(key[0]))


relaxed = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

RUN_ID = "r"


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8"))
    except ValueError:
        return False
    return True


def _reference_log(data: bytes, run_id: str, where: str) -> RunLog:
    """Split into byte lines, decode each on its own, refuse a bad line unless it is the last
    and not even JSON (a torn write)."""
    cut = data.rfind(b"\n") + 1
    lines = data[:cut].split(b"\n")[:-1] if cut else []
    started: RunStarted | None = None
    finished: RunFinished | None = None
    intents: list[Intent] = []
    results: list[ModelCallResult] = []
    steps: list[StepCompleted] = []
    seen: set[tuple[object, ...]] = set()
    order = WriteOrderCheck(where)
    for index, line in enumerate(lines):
        position = f"line {index + 1}"
        try:
            record = loads_log_record(line.decode("utf-8"))
        except (SerializationError, UnicodeDecodeError) as error:
            if index == len(lines) - 1 and not _is_json(line):
                break
            raise CorruptLogError(
                f"{where}, {position}: not a valid log record ({error})."
            ) from None
        if record.run_id != run_id:
            raise CorruptLogError(f"{where}, {position}: holds a record of run")
        if _key(record) in seen:
            raise CorruptLogError(f"{where}, {position}: a second {_named(_key(record))} for run")
        seen.add(_key(record))
        order.add(record, "line", index + 1)  # the shared rule of the loop's write order
        if isinstance(record, RunStarted):
            started = record
        elif isinstance(record, Intent):
            intents.append(record)
        elif isinstance(record, ModelCallResult):
            results.append(record)
        elif isinstance(record, StepCompleted):
            steps.append(record)
        else:
            finished = record
    return RunLog(started, tuple(intents), tuple(results), tuple(steps), finished)


@dataclass(frozen=True)
class _Tail:
    valid_end: int
    keys: frozenset[tuple[object, ...]]


def _reference_tail(data: bytes) -> _Tail:
    cut = data.rfind(b"\n") + 1
    lines = data[:cut].split(b"\n")[:-1] if cut else []
    valid_end = cut
    if lines:
        try:
            loads_log_record(lines[-1].decode("utf-8"))
        except (SerializationError, UnicodeDecodeError):
            if not _is_json(lines[-1]):
                valid_end -= len(lines[-1]) + 1
                lines.pop()
    keys = set()
    for line in lines:
        try:
            keys.add(_key(loads_log_record(line.decode("utf-8"))))
        except (SerializationError, UnicodeDecodeError):
            continue  # a bad line before the end: the reader's to report
    return _Tail(valid_end, frozenset(keys))


def _with_run_id(record: Any, run_id: str) -> Any:
    if isinstance(record, RunFinished):
        result = record.result
        return RunFinished(
            run_id,
            type(result)(
                run_id,
                result.stop_reason,
                result.final_answer,
                result.steps,
                result.schema_version,
                result.event_delivery_failures,
            ),
        )
    fields = {name: getattr(record, name) for name in record.__dataclass_fields__}
    fields["run_id"] = run_id
    # A follow-up or a fork names another run: never the one it is renamed to.
    for other in ("follows_run_id", "forked_from_run_id"):
        if fields.get(other) == run_id:
            fields[other] = f"{run_id}-before"
    return type(record)(**fields)


#: Lines a file can hold: good records (of this run, now and then of another), garbage, bytes
#: that are not UTF-8, a record cut short, blank and whitespace-padded lines, JSON that is no
#: record (of another schema version, of no known shape).
_good_lines = log_records.map(lambda record: dumps_log_record(_with_run_id(record, RUN_ID)))
_lines = st.one_of(
    *([_good_lines.map(str.encode)] * 6),
    log_records.map(lambda record: dumps_log_record(_with_run_id(record, "other")).encode()),
    _good_lines.map(lambda line: line.encode()[: len(line) // 2]),
    _good_lines.map(lambda line: b"  " + line.encode() + b" "),
    _good_lines.map(lambda line: b"\xef\xbb\xbf" + line.encode()),
    st.sampled_from(
        [
            b"",
            b"garbage",
            b"\xff\xfe not utf-8",
            b'{"type":"run_started"',
            b'{"type":"run_finished", "record": 1}',
            b"{}",
            b"[1, 2]",
        ]
    ),
    # Complete JSON that is no record of this schema: edited, never torn.
    _good_lines.map(lambda line: line.replace('"schema_version":1', '"schema_version":2').encode()),
)
_files = st.builds(
    lambda lines, tail: b"".join(line + b"\n" for line in lines) + tail,
    st.lists(_lines, max_size=8),
    st.sampled_from(
        [
            b"",
            b'{"type":"int',
            b"\xff",
            b"garbage",
            b'{"type":"run_started"',
            b'{"type":"run_finished"',
        ]
    ),
)


def _outcome(function: Any, *args: Any) -> Any:
    """The log, or the error's position and the start of what it says is wrong there."""
    try:
        return function(*args)
    except CorruptLogError as error:
        position, rule = str(error).split(": ", 1)
        return (CorruptLogError, position, rule[:20])


@relaxed
@given(data=_files)
def test_parse_log_decides_as_a_line_by_line_reader(data: bytes) -> None:
    """Same log, or the same kind of error naming the same line."""
    assert _outcome(parse_log, data, RUN_ID, "f") == _outcome(_reference_log, data, RUN_ID, "f")


@relaxed
@given(data=_files)
def test_scan_tail_decides_as_a_line_by_line_scan(data: bytes) -> None:
    """Same end of the good part, and the same keys of the records in it."""
    tail = scan_tail(data)
    keys = frozenset(
        key
        if key[0] != "run_started" and key[0] != "run_finished"
        else ("RunStarted" if key[0] == "run_started" else "RunFinished",)
        for key in tail.keys
    )
    assert _reference_tail(data) == _Tail(tail.valid_end, keys)


def test_a_line_that_is_not_utf8_is_named_even_when_the_rest_is_text() -> None:
    """One bad byte sends the whole file down the line-by-line path, which names that line."""
    good = dumps_log_record(_with_run_id(RunStarted(RUN_ID, {}), RUN_ID)).encode()
    with pytest.raises(CorruptLogError, match=r"^f, line 2: not a valid log record"):
        parse_log(good + b"\n\xff\n" + good + b"\n", RUN_ID, "f")
    # ... and as the last line it is a torn write
    assert parse_log(good + b"\n\xff\n", RUN_ID, "f").started == RunStarted(RUN_ID, {})
