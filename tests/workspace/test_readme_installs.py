"""Every Python example of the READMEs names the distributions it needs (tests/readme_examples.py).

The examples that run whole are also installed from wheels, exactly as named, into an empty
venv and run there: tests/workspace/test_package_layout.py.
"""

from __future__ import annotations

from tests.readme_examples import examples, needed, provided


def test_the_readmes_have_examples() -> None:
    assert len(examples()) >= 10


def test_every_example_names_the_distributions_it_imports_from() -> None:
    missing = {
        example.where(): sorted(needed(example.code) - provided(example.installs))
        for example in examples()
    }
    assert {where: names for where, names in missing.items() if names} == {}


def test_the_quick_start_names_core_and_stores() -> None:
    quick_start = examples()[0]
    assert quick_start.readme.name == "README.md"
    assert quick_start.installs == ("polyloop-core", "polyloop-stores")
