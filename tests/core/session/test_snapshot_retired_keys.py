"""Where a shipped store's logs lived is left out of the snapshot comparison for runs recorded
before design 0040, and nothing else is."""

from __future__ import annotations

import pytest

from polyloop.session._definition import RETIRED_STORE_KEYS, snapshot_differences

CURRENT = {"store.kind": "sqlite", "model_client.model": "m"}


@pytest.mark.parametrize(("kind", "keys"), sorted(RETIRED_STORE_KEYS.items()))
def test_the_old_location_keys_of_a_shipped_store_are_left_out(
    kind: str, keys: tuple[str, ...]
) -> None:
    """A snapshot recorded with the store's old location keys equals today's without them."""
    current = {**CURRENT, "store.kind": kind}
    recorded = {**current, **{key: "/old/place" for key in keys}}
    assert [] == snapshot_differences(recorded, current)


def test_a_location_key_of_another_kind_is_still_a_difference() -> None:
    """Only the keys the recorded kind's store used to report are left out."""
    recorded = {**CURRENT, "store.directory": "/old/place"}
    assert ["  store.directory: recorded '/old/place', now '<absent>'"] == snapshot_differences(
        recorded, CURRENT
    )


def test_a_key_the_current_store_still_reports_is_compared() -> None:
    """A store that reports such a key today (a downstream one) has it compared as ever."""
    recorded = {**CURRENT, "store.path": "/old/place"}
    current = {**CURRENT, "store.path": "/new/place"}
    assert ["  store.path: recorded '/old/place', now '/new/place'"] == snapshot_differences(
        recorded, current
    )


def test_another_difference_is_still_reported_next_to_a_left_out_key() -> None:
    """Leaving out the old location hides nothing else."""
    recorded = {**CURRENT, "store.path": "/old/place", "model_client.model": "other"}
    assert ["  model_client.model: recorded 'other', now 'm'"] == snapshot_differences(
        recorded, CURRENT
    )
