"""`polyloop.leasing`: the in-process lease table, the release-once handle, the fork hook."""

from __future__ import annotations

import os

import pytest

from polyloop.errors import RunLeaseHeldError
from polyloop.leasing import LeaseTable, ReleasedOnce, forget_in_forked_child


class _Counted(ReleasedOnce):
    __slots__ = ("gave_back",)

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.gave_back = 0

    async def _give_back(self) -> None:
        self.gave_back += 1


def test_a_second_holder_is_refused_naming_the_first() -> None:
    """A run in the table is refused to a second taker, with this process named as holder."""
    table: LeaseTable[object] = LeaseTable()
    first = table.take("r", object())
    with pytest.raises(RunLeaseHeldError, match=f"process {os.getpid()}"):
        table.take("r", object())
    holder = table.holder("r")
    assert holder is not None
    assert holder.process_id == os.getpid()
    assert table.holder("other") is None
    assert table.give_back("r", first) is True
    assert table.holder("r") is None


def test_a_stale_lease_does_not_free_its_successor() -> None:
    """Giving back with a lease that no longer holds the run leaves the holder in place."""
    table: LeaseTable[object] = LeaseTable()
    old = table.take("r", object())
    table.give_back("r", old)
    new = table.take("r", object())
    assert table.give_back("r", old) is False
    assert table.holder("r") is not None
    with pytest.raises(RunLeaseHeldError):
        table.take("r", object())
    table.give_back("r", new)


async def test_release_gives_back_once() -> None:
    """However often release() is called, the store is asked to give the lease back once."""
    lease = _Counted("r")
    assert not lease.released
    await lease.release()
    await lease.release()
    assert lease.released
    assert lease.gave_back == 1
    assert lease.run_id == "r"


def test_a_forked_child_starts_with_an_empty_table() -> None:
    """In a child made by fork, a registered table holds none of the parent's runs; the
    parent's stays as it was."""
    table: LeaseTable[object] = forget_in_forked_child(LeaseTable())
    table.take("r", object())
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running pytest's teardown
        try:
            empty = table.holder("r") is None
            table.take("r", object())  # not refused: the parent's lease is not the child's
            os.write(write_end, b"empty" if empty else b"held")
        finally:
            os._exit(0)
    os.close(write_end)
    answer = os.read(read_end, 16)
    os.close(read_end)
    os.waitpid(pid, 0)
    assert answer == b"empty"
    assert table.holder("r") is not None
