"""``paused_collection`` (design 0056): the cyclic collector is off inside, nested and
concurrent pauses end together, and a collector the application switched off stays off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from polyloop.stores._decoding import paused_collection


@pytest.fixture(autouse=True)
def _collector_back_on() -> Iterator[None]:
    yield
    gc.enable()


def test_the_collector_is_off_inside_and_on_again_after() -> None:
    gc.enable()
    with paused_collection():
        assert not gc.isenabled()
        with paused_collection():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause is still going on
    assert gc.isenabled()


def test_an_error_inside_still_switches_it_back_on() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), paused_collection():
        raise RuntimeError("decoding failed")
    assert gc.isenabled()


def test_a_collector_switched_off_by_the_application_stays_off() -> None:
    gc.disable()
    with paused_collection():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_concurrent_pauses_end_when_the_last_one_leaves() -> None:
    gc.enable()
    inside, leave = threading.Barrier(2), threading.Event()

    def other() -> None:
        with paused_collection():
            inside.wait()
            leave.wait()

    thread = threading.Thread(target=other)
    thread.start()
    with paused_collection():
        inside.wait()
    assert not gc.isenabled()  # the other thread still decodes
    leave.set()
    thread.join()
    assert gc.isenabled()
