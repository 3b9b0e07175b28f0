"""``fast_frozen_init`` gives frozen dataclasses an ``__init__`` equivalent to the generated one."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from polyloop import ports, types
from polyloop._frozen import fast_frozen_init


def _frozen_dataclasses() -> list[type]:
    found = []
    for module in (types, ports):
        for name in module.__all__:
            value = getattr(module, name)
            if isinstance(value, type) and dataclasses.is_dataclass(value):
                found.append(value)
    return found


@pytest.mark.parametrize("cls", _frozen_dataclasses(), ids=lambda c: c.__name__)
def test_signature_matches_the_fields(cls: type) -> None:
    parameters = list(inspect.signature(cls).parameters.values())
    fields = dataclasses.fields(cls)
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, f in zip(parameters, fields, strict=True):
        assert parameter.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
        if f.default is not dataclasses.MISSING:
            assert parameter.default is f.default
        elif f.default_factory is not dataclasses.MISSING:
            assert repr(parameter.default) == "<factory>"
        else:
            assert parameter.default is inspect.Parameter.empty
    assert cls.__init__.__qualname__ == f"{cls.__qualname__}.__init__"  # type: ignore[misc]


@fast_frozen_init
@dataclasses.dataclass(frozen=True, slots=True)
class _Sample:
    a: int
    b: str = "b"
    c: list[int] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.a < 0:
            raise ValueError("a must be >= 0")


def test_positional_keyword_defaults_and_factories() -> None:
    assert _Sample(1) == _Sample(a=1, b="b", c=[])
    assert _Sample(1, "x", [2]).c == [2]
    first, second = _Sample(1), _Sample(1)
    assert first.c is not second.c  # the factory runs per instance
    with pytest.raises(TypeError):
        _Sample()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        _Sample(1, d=2)  # type: ignore[call-arg]


def test_post_init_still_runs_and_frozen_still_holds() -> None:
    with pytest.raises(ValueError, match="a must be >= 0"):
        _Sample(-1)
    sample = _Sample(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        sample.a = 2  # type: ignore[misc]
    assert dataclasses.replace(sample, b="z") == _Sample(1, "z")


def test_keyword_only_fields_are_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
    class KeywordOnly:
        a: int

    with pytest.raises(TypeError, match="positional fields only"):
        fast_frozen_init(KeywordOnly)
