"""The values of ``polyloop.asking``: frozen, slotted, picklable, and refusing what is
structurally impossible; a gated run's log survives the kit's snapshot JSON."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from polyloop import asking
from polyloop.asking import AskKind, RunParked, UserAnswered, UserAsked, Verdict
from polyloop.errors import ConfigurationError
from polyloop.stores.memory import MemoryRunStore
from polyloop_contract.trajectory_json import run_log_from_json, trajectory_json
from tests.asking_kit import drive_gated
from tests.loop_kit import Effects

DIGEST = "a" * 64
ASK = UserAsked("r", 0, AskKind.APPROVAL, "x", "t", "{}", DIGEST, DIGEST, DIGEST, None, None, "t")
ANSWER = UserAnswered("r", 0, Verdict.REJECT, DIGEST, None, "no", None, "", "t")
INSTANCES = [ASK, ANSWER, RunParked("r", 0, ASK)]


@pytest.mark.parametrize("value", INSTANCES, ids=lambda v: type(v).__name__)
def test_values_are_frozen_slotted_and_picklable(value: object) -> None:
    """Assigning a field raises, there is no instance dict, and pickling round-trips."""
    name = dataclasses.fields(value)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, getattr(value, name))
    assert not hasattr(value, "__dict__")
    assert value == pickle.loads(pickle.dumps(value))


def test_every_dataclass_of_the_module_is_covered() -> None:
    """The checks above cover every dataclass in polyloop.asking."""
    classes = {
        obj
        for obj in vars(asking).values()
        if isinstance(obj, type) and dataclasses.is_dataclass(obj)
    }
    assert classes == {type(value) for value in INSTANCES}
    assert sorted(asking.__all__) == asking.__all__


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"step": -1}, "step"),
        ({"arguments_sha256": "short"}, "SHA-256"),
        ({"tool_name": None}, "set together"),
        ({"question": "why?"}, "question"),
    ],
)
def test_an_impossible_ask_is_refused(change: dict[str, object], says: str) -> None:
    """Negative step, a malformed digest, arguments without a tool, a question on an approval."""
    with pytest.raises(ConfigurationError, match=says):
        dataclasses.replace(ASK, **change)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"reason": None}, "reason"),
        ({"answer": "yes"}, "answer"),
        ({"verdict": Verdict.EDIT}, "arguments_json"),
    ],
)
def test_an_impossible_decision_is_refused(change: dict[str, object], says: str) -> None:
    """Each verdict carries exactly its own field."""
    with pytest.raises(ConfigurationError, match=says):
        dataclasses.replace(ANSWER, **change)  # type: ignore[arg-type]


async def test_a_gated_log_survives_the_snapshot_json() -> None:
    """The kit's trajectory snapshot of a gated run holds its asks and answers and reads back."""
    store = MemoryRunStore()
    await drive_gated(store, "g", Effects(), started=False)
    log = await store.read_log("g")
    text = trajectory_json(log)
    assert '"user_asked"' in text
    assert log == run_log_from_json(text)
