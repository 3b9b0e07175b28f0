"""A failing disk surfaces as an error from the write, never as success; reading still works.

The disk is made to fail for real, in a child process: ``RLIMIT_FSIZE`` caps how large a file
may grow, so the kernel refuses the store's next write with ``EFBIG`` (the same path as a full
disk, ``ENOSPC``, for everything above the system call). A second test makes ``fdatasync``
itself report ``ENOSPC`` in-process, by replacing the jsonl store's sync function.
"""

from __future__ import annotations

import errno
import json
import os

import pytest

from polyloop.errors import StoreError
from polyloop.ports import RunLog
from polyloop.stores import jsonl
from polyloop.stores.jsonl import JsonlRunStore
from polyloop.types import IntentKind
from tests.stores._helpers import FILE_KINDS, intent, read_bytes, started
from tests.stores._procs import child, finish


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_a_disk_that_refuses_writes_fails_the_write_and_keeps_the_store_readable(
    kind: str, tmp_path: object
) -> None:
    """On a disk that refuses writes (a child process under a file-size limit) the write fails with
    StoreError saying it is NOT stored, every acknowledged record reads back, and the store writes
    again once the disk accepts it."""
    report = json.loads(finish(child("disk-full", kind, os.path.join(str(tmp_path), kind))))
    assert report["error_type"] == "StoreError", report
    assert report["is_polyloop_error"]
    assert "NOT stored" in report["message"]
    # everything acknowledged reads back, and nothing unacknowledged does
    assert report["read_started"]
    assert report["read_intents"] == report["acknowledged"]
    # once the disk accepts writes again, the same store goes on
    assert report["intents_after_recovery"] == report["acknowledged"] + 1
    assert report["last_after_recovery"]


async def test_a_failed_fdatasync_is_an_error_and_leaves_no_line(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed fdatasync fails the write with the OS error and leaves no line behind; the next
    write succeeds."""
    calls = 0
    real_sync = jsonl._sync_data

    def failing_sync(fd: int) -> None:
        nonlocal calls
        calls += 1
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    async with JsonlRunStore(str(tmp_path)) as store:
        await store.write_run_started(started("s"))
        path = store.path_for("s")
        size = len(read_bytes(path))
        monkeypatch.setattr(jsonl, "_sync_data", failing_sync)
        with pytest.raises(StoreError, match="No space left on device"):
            await store.write_intent(intent("s", IntentKind.MODEL_CALL, 0))
        assert calls == 1
        assert len(read_bytes(path)) == size
        assert await store.read_log("s") == RunLog(started=started("s"))
        monkeypatch.setattr(jsonl, "_sync_data", real_sync)
        await store.write_intent(intent("s", IntentKind.MODEL_CALL, 0))
        assert (await store.read_log("s")).intents == (intent("s", IntentKind.MODEL_CALL, 0),)
