"""A faster ``__init__`` for the frozen, slotted dataclasses of ``types`` and ``ports``.

The ``__init__`` that ``dataclasses`` generates for a frozen class sets each field with
``object.__setattr__(self, name, value)``, which looks the attribute up again on every call.
The loop builds about a dozen such records per step, and in CPython 3.11 those lookups were a
fifth of its own cost. :func:`fast_frozen_init` replaces the generated ``__init__`` with one of
the same signature, defaults and ``__post_init__`` call that stores each field through its slot
descriptor directly. Nothing else about the class changes (design 0018).
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["fast_frozen_init"]

T = TypeVar("T")


class _Factory:
    """Default of a field with a ``default_factory``; shows as ``dataclasses`` shows it."""

    def __repr__(self) -> str:
        return "<factory>"


_MISSING = _Factory()


def fast_frozen_init(cls: type[T]) -> type[T]:
    """Give the frozen, slotted dataclass ``cls`` a faster, equivalent ``__init__``."""
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if any(not f.init or f.kw_only for f in params):
        raise TypeError(f"{cls.__qualname__}: fast_frozen_init handles positional fields only")
    namespace: dict[str, Any] = {"_MISSING": _MISSING}
    signature: list[str] = []
    body: list[str] = []
    for f in params:
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            signature.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            signature.append(f"{f.name}=_MISSING")
            body.append(f"if {f.name} is _MISSING: {f.name} = _factory_{f.name}()")
        else:
            signature.append(f.name)
    body.extend(f"_set_{f.name}(self, {f.name})" for f in params)
    if hasattr(cls, "__post_init__"):
        body.append("self.__post_init__()")
    source = f"def __init__(self, {', '.join(signature)}):\n" + "".join(
        f"    {line}\n" for line in body
    )
    exec(source, namespace)  # the same technique dataclasses itself uses
    init = namespace["__init__"]
    generated = cls.__init__
    init.__qualname__ = generated.__qualname__
    init.__module__ = generated.__module__
    init.__annotations__ = generated.__annotations__
    init.__doc__ = generated.__doc__
    cls.__init__ = init  # type: ignore[method-assign]
    return cls
