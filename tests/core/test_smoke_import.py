"""The package imports and exposes exactly its five public modules."""

import polyloop


def test_top_level_exports_the_five_modules() -> None:
    """`polyloop.__all__` lists exactly types, ports, tools, serialization and session."""
    assert ["ports", "serialization", "session", "tools", "types"] == polyloop.__all__
