"""Each tool's schema and description are in the parameter snapshot as digests, so a resume
under other ones is refused naming the key; a run recorded before those keys existed still
resumes (design 0032)."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import pytest

from polyloop.errors import SnapshotMismatchError
from polyloop.session import resume, run_snapshot
from polyloop.stores.memory import MemoryRunStore
from polyloop.tools import Tool, ToolRegistry, ToolSpec
from polyloop.types import RunStarted, StopReason
from tests.loop_kit import make_definition, make_request, replies

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}}
SCRIPT = ('CALL look {"q": "x"}', "FINAL: done")


def _request(schema: dict[str, object] = SCHEMA, description: str = "Look something up."):  # type: ignore[no-untyped-def]
    tools = ToolRegistry([Tool(ToolSpec("look", description, schema), lambda args: "seen")])
    return make_request("d", tools=tools)


async def _recorded(snapshot_of: object, drop_digests: bool = False) -> MemoryRunStore:
    """A store holding only the RunStarted of run ``d`` started with ``snapshot_of``'s
    snapshot (without its digest keys, as a run recorded before they existed)."""
    snapshot = dict(run_snapshot(make_definition(replies(*SCRIPT)), snapshot_of))  # type: ignore[arg-type]
    if drop_digests:
        snapshot = {key: value for key, value in snapshot.items() if not key.endswith("_sha256")}
    store = MemoryRunStore()
    await store.write_run_started(RunStarted("d", snapshot))
    return store


def test_the_snapshot_holds_the_sha256_of_the_canonical_schema_and_of_the_description() -> None:
    """The digests are of the schema's canonical JSON and of the description's UTF-8 text."""
    snapshot = run_snapshot(make_definition(replies(*SCRIPT)), _request())
    expected = hashlib.sha256(b'{"properties":{"q":{"type":"string"}},"type":"object"}')
    assert expected.hexdigest() == snapshot["request.tools.look.schema_sha256"]
    description = hashlib.sha256(b"Look something up.").hexdigest()
    assert description == snapshot["request.tools.look.description_sha256"]


@pytest.mark.parametrize(
    ("changed", "key"),
    [
        (_request(schema={"type": "object"}), "request.tools.look.schema_sha256"),
        (_request(description="Look up, quickly."), "request.tools.look.description_sha256"),
    ],
)
async def test_a_resume_under_another_schema_or_description_is_refused_naming_the_key(
    changed: object, key: str
) -> None:
    """Resuming with another schema or description is refused, naming the digest's key, and
    nothing is written."""
    store = await _recorded(_request())
    before = await store.read_log("d")
    with pytest.raises(SnapshotMismatchError, match=rf"\n  {key}: recorded '[0-9a-f]{{64}}'"):
        await resume(make_definition(replies(*SCRIPT), store), changed)  # type: ignore[arg-type]
    assert before == await store.read_log("d")


async def test_a_run_recorded_without_digests_resumes_to_its_end() -> None:
    """A snapshot recorded before the digest keys existed is compared without them, so the run
    resumes (even under a changed description: the old record cannot tell)."""
    store = await _recorded(_request(), drop_digests=True)
    changed = _request(description="Look up, quickly.")
    result = await resume(make_definition(replies(*SCRIPT), store), changed)
    assert StopReason.AGENT_FINISHED == result.stop_reason
    log = await store.read_log("d")
    assert log.started is not None
    assert not any(key.endswith("_sha256") for key in log.started.parameter_snapshot)


async def test_a_recorded_snapshot_missing_one_digest_of_a_family_it_has_is_refused() -> None:
    """Once a snapshot holds a key of a digest family, a missing one of that family is a
    difference like any other."""
    store = await _recorded(_request())
    log = await store.read_log("d")
    assert log.started is not None
    snapshot = dict(log.started.parameter_snapshot)
    snapshot["request.tools.other.schema_sha256"] = "0" * 64
    edited = MemoryRunStore()
    await edited.write_run_started(replace(log.started, parameter_snapshot=snapshot))
    with pytest.raises(
        SnapshotMismatchError, match=r"request.tools.other.schema_sha256: recorded '0+', now "
    ):
        await resume(make_definition(replies(*SCRIPT), edited), _request())
