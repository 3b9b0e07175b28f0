"""JsonlRunStore: file naming, torn tails, corruption, file handles."""

from __future__ import annotations

import os

import pytest

from polyloop.errors import ConfigurationError, CorruptLogError, StoreError
from polyloop.ports import RunLog
from polyloop.serialization import dumps_log_record
from polyloop.stores._naming import file_name_for
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.types import IntentKind
from tests.stores._helpers import (
    HOSTILE_RUN_IDS,
    exists,
    expected_log,
    finished,
    intent,
    read_bytes,
    same_directory,
    started,
    write_bytes,
    write_run,
)


def _line(record: object) -> bytes:
    return (dumps_log_record(record) + "\n").encode()  # type: ignore[arg-type]


async def test_hostile_run_ids_stay_inside_the_directory_with_distinct_names(
    tmp_path: object,
) -> None:
    """Every hostile run_id gets a file of its own inside the directory: no separator, NUL or
    leading dot, shorter than 255 bytes, distinct ignoring case, nothing created beside the
    directory."""
    directory = os.path.join(str(tmp_path), "runs")
    async with JsonlRunStore(directory) as store:
        for run_id in HOSTILE_RUN_IDS:
            await store.write_run_started(started(run_id))
    names = os.listdir(directory)
    assert len(names) == len(HOSTILE_RUN_IDS)
    # distinct even on a case-insensitive disk
    assert len({name.lower() for name in names}) == len(HOSTILE_RUN_IDS)
    for run_id in HOSTILE_RUN_IDS:
        name = file_name_for(run_id)
        assert name in names
        assert os.sep not in name
        assert "\x00" not in name
        assert not name.startswith(".")
        assert len(name.encode()) < 255
        assert same_directory(directory, name)
    # nothing appeared next to the directory (no ../x, no /etc/passwd)
    assert os.listdir(str(tmp_path)) == ["runs"]


def test_file_names_differ_by_more_than_case() -> None:
    """Run ids differing only in case get file names whose hash parts differ."""
    assert file_name_for("Run").lower() != file_name_for("run").lower()
    assert file_name_for("Run").split(".")[1] != file_name_for("run").split(".")[1]


def test_a_lone_surrogate_run_id_is_refused_with_advice() -> None:
    """A run_id with a lone surrogate has no file name: StoreError saying to use ordinary
    characters."""
    with pytest.raises(StoreError, match="ordinary characters"):
        file_name_for("bad\udc80id")


def test_cheap_tail_scan_matches_the_codec_tags() -> None:
    """Head and tail lines start with the tags the writer recognises by prefix, without decoding."""
    assert _line(started("x")).startswith(b'{"type":"run_started"')
    assert _line(finished("x", 0)).startswith(b'{"type":"run_finished"')


@pytest.mark.parametrize(
    "torn",
    [
        b'{"type":"intent","record":{"run_id":"t"',  # no newline
        b"\x00\x00\x00\x00\x00\x00",  # size grew, data never written
        b'{"type":"intent","rec\n',  # unparseable line at EOF
        b"\x00\x00\x00\n",
    ],
)
async def test_a_torn_last_line_is_ignored_and_cut_off_before_the_next_append(
    tmp_path: object, torn: bytes
) -> None:
    """A torn tail (no newline, or not JSON at end of file) is ignored on read and cut off by the
    next append, which lands right after the last good line."""
    async with JsonlRunStore(str(tmp_path)) as store:
        expected = await write_run(store, "t", 2, finish=False)
        path = store.path_for("t")
    good = read_bytes(path)
    write_bytes(path, torn, append=True)
    async with JsonlRunStore(str(tmp_path)) as store:
        assert await store.read_log("t") == expected
        await store.write_run_finished(finished("t", 2))
        assert await store.read_log("t") == expected_log("t", 2)
    assert read_bytes(path) == good + _line(finished("t", 2))


#: Edits of a complete last line that leave it JSON but no record of this run: the line is
#: a StepCompleted (schema versions live in its step record) or an intent.
LAST_LINE_EDITS = {
    "schema version 2": (False, lambda line: line.replace(b'_version":1', b'_version":2')),
    "schema version removed": (False, lambda line: line.replace(b',"schema_version":1', b"")),
    "unknown tag": (True, lambda line: line.replace(b'"type":"intent"', b'"type":"intention"')),
    "field removed": (True, lambda line: line.replace(b',"replay_policy":"safe"', b"")),
    "another run": (True, lambda line: line.replace(b'"run_id":"u"', b'"run_id":"v"')),
}


@pytest.mark.parametrize("edit", sorted(LAST_LINE_EDITS))
async def test_a_complete_last_line_that_is_no_record_is_corruption_and_never_cut_off(
    tmp_path: object, edit: str
) -> None:
    """An edited last line (JSON, newline-terminated) of an unfinished run is refused naming
    the file and line, by reads before and after the next append, and stays in the file."""
    ends_with_intent, change = LAST_LINE_EDITS[edit]
    async with JsonlRunStore(str(tmp_path)) as store:
        await write_run(store, "u", 2, finish=False)
        if ends_with_intent:
            await store.write_intent(intent("u", IntentKind.MODEL_CALL, 2))
    path = store.path_for("u")
    lines = read_bytes(path).splitlines(keepends=True)
    edited = change(lines[-1])
    assert edited != lines[-1]
    kept = b"".join([*lines[:-1], edited])
    write_bytes(path, kept)
    where = f"{path}, line {len(lines)}: "
    async with JsonlRunStore(str(tmp_path)) as store:
        with pytest.raises(CorruptLogError) as refused:
            await store.read_log("u")
        assert where == str(refused.value)[: len(where)]
        await store.write_run_finished(finished("u", 2))  # appended after it, not over it
    async with JsonlRunStore(str(tmp_path)) as store:
        with pytest.raises(CorruptLogError) as again:
            await store.read_log("u")
    assert (where, kept) == (str(again.value)[: len(where)], read_bytes(path)[: len(kept)])


async def test_a_torn_first_line_does_not_count_as_started(tmp_path: object) -> None:
    """A file holding only a torn first line is no run, and the run can still be started."""
    async with JsonlRunStore(str(tmp_path)) as store:
        path = store.path_for("half")
        os.makedirs(str(tmp_path), exist_ok=True)
        write_bytes(path, _line(started("half"))[:-9])
        assert await store.read_log("half") == RunLog()
        await store.write_run_started(started("half"))
        assert await store.read_log("half") == RunLog(started=started("half"))


async def test_a_bad_line_before_the_end_is_corruption_naming_file_and_line(
    tmp_path: object,
) -> None:
    """A line that is no record before the last one is CorruptLogError naming the file and the line
    number."""
    async with JsonlRunStore(str(tmp_path)) as store:
        await write_run(store, "c", 2, finish=False)
        path = store.path_for("c")
    lines = read_bytes(path).split(b"\n")
    lines[2] = b'{"type":"intent","record":{"oops":1}}'
    write_bytes(path, b"\n".join(lines))
    async with JsonlRunStore(str(tmp_path)) as store:
        with pytest.raises(CorruptLogError) as caught:
            await store.read_log("c")
    assert path in str(caught.value)
    assert "line 3" in str(caught.value)


async def test_a_record_of_another_run_in_the_file_is_corruption(tmp_path: object) -> None:
    """A record of another run_id in a run's file is CorruptLogError naming that run."""
    async with JsonlRunStore(str(tmp_path)) as store:
        await store.write_run_started(started("mine"))
        path = store.path_for("mine")
    write_bytes(path, _line(intent("theirs", IntentKind.MODEL_CALL, 0)), append=True)
    async with JsonlRunStore(str(tmp_path)) as store:
        with pytest.raises(CorruptLogError, match="theirs"):
            await store.read_log("mine")


async def test_appends_from_another_store_are_seen_before_appending(tmp_path: object) -> None:
    """A store object whose view of a file is stale looks again before appending: it refuses a
    second RunFinished another object wrote, and reads both objects' records."""
    async with JsonlRunStore(str(tmp_path)) as first, JsonlRunStore(str(tmp_path)) as second:
        await first.write_run_started(started("shared"))
        await first.write_intent(intent("shared", IntentKind.MODEL_CALL, 0))
        await second.write_run_finished(finished("shared", 0))
        # first's cached view is stale; it must notice the finish written by second
        with pytest.raises(StoreError, match="RunFinished"):
            await first.write_run_finished(finished("shared", 0))
        log = await first.read_log("shared")
    assert log.intents == (intent("shared", IntentKind.MODEL_CALL, 0),)
    assert log.finished == finished("shared", 0)


async def test_more_runs_than_open_files_still_work(tmp_path: object) -> None:
    """With more runs than max_open_files, files are closed and reopened and every run reads back
    whole."""
    async with JsonlRunStore(str(tmp_path), max_open_files=2, max_workers=3) as store:
        ids = [f"many-{i}" for i in range(7)]
        for run_id in ids:
            await store.write_run_started(started(run_id))
        for run_id in ids:
            await store.write_intent(intent(run_id, IntentKind.MODEL_CALL, 0))
        for run_id in ids:
            log = await store.read_log(run_id)
            assert log == RunLog(
                started=started(run_id), intents=(intent(run_id, IntentKind.MODEL_CALL, 0),)
            )


async def test_the_directory_is_created_on_first_write_only(tmp_path: object) -> None:
    """Reading creates no directory; the first write creates it, holding only that run's file."""
    directory = os.path.join(str(tmp_path), "a", "b")
    async with JsonlRunStore(directory) as store:
        assert await store.read_log("x") == RunLog()
        assert not exists(directory)
        await store.write_run_started(started("x"))
    assert os.listdir(directory) == [file_name_for("x")]


async def test_a_closed_store_refuses_work_with_advice(tmp_path: object) -> None:
    """After close, a read raises StoreError saying the store is closed."""
    store = JsonlRunStore(str(tmp_path))
    await store.write_run_started(started("x"))
    store.close()
    with pytest.raises(StoreError, match="closed"):
        await store.read_log("x")


def test_parameters_name_the_kind_only(tmp_path: object) -> None:
    """parameters() are the kind only (the directory's place is not a parameter: design
    0040), computed without creating it; the store still knows its absolute directory."""
    store = JsonlRunStore(os.path.join(str(tmp_path), "d"))
    assert store.parameters() == {"kind": "jsonl"}
    assert os.path.join(os.path.abspath(str(tmp_path)), "d") == store.directory
    assert not os.path.exists(os.path.join(str(tmp_path), "d"))
    store.close()


async def test_listing_skips_torn_only_files_and_refuses_renamed_ones(tmp_path: object) -> None:
    """list_run_ids skips a file holding only a torn line and refuses a file whose name does not
    belong to the run it holds."""
    async with JsonlRunStore(str(tmp_path)) as store:
        assert await store.list_run_ids() == ()
        await store.write_run_started(started("real"))
        write_bytes(store.path_for("torn"), _line(started("torn"))[:20])
        assert await store.list_run_ids() == ("real",)
        write_bytes(store.path_for("copy"), read_bytes(store.path_for("real")))
        with pytest.raises(CorruptLogError, match="renamed or copied"):
            await store.list_run_ids()


def test_nonsense_limits_are_refused(tmp_path: object) -> None:
    """max_open_files or max_workers below 1 are refused with ConfigurationError naming the
    argument."""
    with pytest.raises(ConfigurationError, match="max_open_files"):
        JsonlRunStore(str(tmp_path), max_open_files=0)
    with pytest.raises(ConfigurationError, match="max_workers"):
        JsonlRunStore(str(tmp_path), max_workers=0)
