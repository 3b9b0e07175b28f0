"""Which clusters a store kept in local files may serve (the rule, without a cluster)."""

from __future__ import annotations

from pathlib import Path

from polyloop.batch._placement import local_store_refusal


def test_a_local_file_store_is_refused_when_nodes_run_on_other_hosts() -> None:
    """Nodes on other hosts cannot share a sqlite/jsonl store's locks: refused, saying why,
    unless --shared-disk says they share the disk; nodes all on this host are fine."""
    path = Path("/data/runs.sqlite")
    assert None is local_store_refusal(path, ["vm", "vm"], "vm", shared_disk=False)
    assert None is local_store_refusal(path, ["vm", "gpu-7"], "vm", shared_disk=True)
    refusal = local_store_refusal(path, ["vm", "gpu-7", "gpu-8"], "vm", shared_disk=False)
    assert (
        "the store /data/runs.sqlite is local files, but Ray nodes run on other hosts "
        "(gpu-7, gpu-8) whose file locks cannot exclude this host's; use a postgresql:// "
        "store, or --shared-disk if all nodes share this disk."
    ) == refusal
