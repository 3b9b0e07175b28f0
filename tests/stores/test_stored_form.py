"""The stores' stored form writes repeated text once and reads back exactly what was written
(design 0041); a line without its marks is the full line, read as before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polyloop.errors import CorruptLogError, SerializationError
from polyloop.serialization import dumps_log_record
from polyloop.stores._stored_form import SHARED_FROM, StoredSteps, decode_stored, stored_line
from polyloop.types import RunFinished, StepCompleted, StepRecord
from tests.stores._helpers import finished, step_completed
from tests.strategies import log_records, step_completed_records, step_records, texts

#: Records can hold texts of a hundred thousand characters: no deadline, fewer examples.
relaxed = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@relaxed
@given(record=log_records)
def test_every_record_reads_back_exactly_as_written(record: object) -> None:
    """Any record, stored with nothing known of its run, decodes to itself."""
    assert record == decode_stored(stored_line(record), {})  # type: ignore[arg-type]


@relaxed
@given(record=step_completed_records, observation=texts)
def test_a_step_sharing_its_outcomes_observation_holds_it_once(
    record: StepCompleted, observation: str
) -> None:
    """When the step's observation is the outcome's, the line carries the text once and the
    record reads back whole; otherwise the line is the full one."""
    if record.action_outcome is not None:
        outcome = replace(record.action_outcome, observation=observation)
        record = replace(
            record, action_outcome=outcome, step=replace(record.step, observation=observation)
        )
    line = stored_line(record)
    assert record == decode_stored(line, None)
    shares = record.action_outcome is not None and len(observation) >= SHARED_FROM
    assert shares == line.endswith(',"same_observation":true}')
    if not shares:
        assert dumps_log_record(record) == line
    else:  # the step's copy is gone; the mark costs its own few bytes
        mark = ',"same_observation":true'
        assert len(dumps_log_record(record)) - len(line) >= len(observation) - len(mark)


@relaxed
@given(steps=st.lists(step_records, min_size=1, max_size=5), which=st.integers(0, 4))
def test_a_run_finished_refers_to_the_steps_the_store_knows(
    steps: list[StepRecord], which: int
) -> None:
    """A RunFinished whose steps are all known stored steps is written as their indices and
    read back from the log's steps; one unknown or different step writes it in full."""
    steps = [replace(step, step_idx=k) for k, step in enumerate(steps)]
    record = finished("r", 0)
    record = RunFinished("r", replace(record.result, steps=tuple(steps)))
    known = {step.step_idx: step for step in steps}
    line = stored_line(record, known)
    assert f',"steps_of_log":[{",".join(str(k) for k in known)}]}}' in line
    assert record == decode_stored(line, known)
    other = steps[which % len(steps)]
    changed = dict(known)
    changed[other.step_idx] = replace(other, observation=other.observation + "!")
    assert dumps_log_record(record) == stored_line(record, changed)
    del changed[other.step_idx]
    assert dumps_log_record(record) == stored_line(record, changed)


def test_a_run_finished_referring_to_a_step_the_log_lacks_is_corrupt() -> None:
    """A step row or line removed by hand makes the RunFinished unreadable, naming the step."""
    step = step_completed("r", 0, "seen").step
    record = RunFinished("r", replace(finished("r", 0).result, steps=(step,)))
    line = stored_line(record, {0: step})
    with pytest.raises(CorruptLogError, match="step 0, which the log does not hold"):
        decode_stored(line, {}, "runs.db, run_records seq 9")


def test_a_salvage_keeps_a_run_finished_without_the_steps_it_cannot_read() -> None:
    """Salvaging, the RunFinished comes back with the steps the log still holds (the
    unreadable step's own line is what the salvage reports)."""
    first, second = step_completed("r", 0, "a").step, step_completed("r", 1, "b").step
    record = RunFinished("r", replace(finished("r", 0).result, steps=(first, second)))
    line = stored_line(record, {0: first, 1: second})
    salvaged = decode_stored(line, {1: second}, salvaging=True)
    assert RunFinished("r", replace(record.result, steps=(second,))) == salvaged


@pytest.mark.parametrize(
    "line",
    [
        # a mark on a record that cannot carry it
        dumps_log_record(finished("r", 1))[:-1] + ',"same_observation":true}',
        dumps_log_record(step_completed("r", 0, "x"))[:-1] + ',"steps_of_log":[0]}',
        # the step's observation is not empty under the mark
        dumps_log_record(step_completed("r", 0, "x"))[:-1] + ',"same_observation":true}',
    ],
)
def test_a_mark_the_stores_never_write_is_refused(line: str) -> None:
    """A line marked in a way no store writes is a SerializationError, not a guess."""
    with pytest.raises(SerializationError):
        decode_stored(line, {0: step_completed("r", 0, "x").step})


def test_stored_steps_forget_a_finished_run_and_old_runs() -> None:
    """The store object's memory of stored steps ends with the run, and keeps few runs."""
    known = StoredSteps(limit=2)
    for run_id in ("a", "b", "c"):
        known.stored(step_completed(run_id, 0))
    assert (None, {0}, {0}) == (
        known.of("a"),
        set(known.of("b") or ()),
        set(known.of("c") or ()),
    )
    known.stored(finished("c", 1))
    assert None is known.of("c")
