"""How the kit describes records, and the first difference between two run logs, in words."""

from __future__ import annotations

from dataclasses import fields

from polyloop.ports import RunLog
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted
from polyloop_contract._checks import shown

__all__ = ["describe", "log_difference"]


def describe(record: object) -> str:
    """A short, readable name of a record for failure messages."""
    if isinstance(record, RunStarted):
        return f"RunStarted(run_id={shown(record.run_id)})"
    if isinstance(record, Intent):
        return (
            f"Intent(kind={record.kind.value}, call_index={record.call_index}, "
            f"result_id={shown(record.result_id)})"
        )
    if isinstance(record, ModelCallResult):
        state = "failure" if record.failure is not None else "reply"
        return f"ModelCallResult(result_id={shown(record.result_id)}, {state})"
    if isinstance(record, StepCompleted):
        action = "with action" if record.result_id is not None else "no action"
        return f"StepCompleted(step {record.step.step_idx}, {action})"
    if isinstance(record, RunFinished):
        return f"RunFinished(stop_reason={record.result.stop_reason.value})"
    return repr(record)


def _first_difference(expected: object, actual: object) -> str:
    """Name the first field that differs between two records of one type."""
    if type(expected) is not type(actual):
        return f"a {type(actual).__name__} where a {type(expected).__name__} belongs"
    try:
        names = [f.name for f in fields(expected)]  # type: ignore[arg-type]
    except TypeError:
        return f"{shown(actual)} instead of {shown(expected)}"
    for name in names:
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            inner = _first_difference(want, got) if hasattr(want, "__dataclass_fields__") else ""
            if inner:
                return f"field {name}: {inner}"
            return f"field {name} is {shown(got, 120)} instead of {shown(want, 120)}"
    return "equal fields but unequal records"


_NOUNS = {"intents": "intents", "model_results": "model results", "steps": "steps"}


def _counts(name: str, written: int, read: int) -> str:
    """How many records of one kind came back, said before the first difference."""
    if read < written:
        return f"{read} of {written} {_NOUNS[name]} read back; "
    if read > written:
        return f"{read} {_NOUNS[name]} read back where {written} were written; "
    return ""


def log_difference(expected: RunLog, actual: object) -> str | None:
    """``None`` when ``actual`` equals ``expected``; else the first difference, in words."""
    if not isinstance(actual, RunLog):
        return f"read_log returned {type(actual).__name__}, not a RunLog"
    for name in ("started", "finished"):
        want, got = getattr(expected, name), getattr(actual, name)
        if want != got:
            if got is None:
                return f"{describe(want)} is missing"
            if want is None:
                return f"an unexpected {describe(got)} is present"
            return f"{describe(want)} reads back with {_first_difference(want, got)}"
    for name in ("intents", "model_results", "steps"):
        want_seq, got_seq = getattr(expected, name), getattr(actual, name)
        if tuple(want_seq) == tuple(got_seq):
            continue
        counts = _counts(name, len(want_seq), len(got_seq))
        for position in range(max(len(want_seq), len(got_seq))):
            if position >= len(got_seq):
                return f"{counts}{name} #{position}: {describe(want_seq[position])} is missing"
            if position >= len(want_seq):
                return (
                    f"{counts}{name} #{position}: an unexpected "
                    f"{describe(got_seq[position])} is present"
                )
            want, got = want_seq[position], got_seq[position]
            if want != got:
                if type(want) is type(got) and want in tuple(got_seq):
                    return (
                        f"{counts}{name} #{position}: {describe(got)} where {describe(want)} was "
                        "written (records come back out of write order)"
                    )
                return (
                    f"{counts}{name} #{position}: {describe(want)} reads back with "
                    f"{_first_difference(want, got)}"
                )
        return f"{counts}{name} differ"
    return None
