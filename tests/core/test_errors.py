"""Every error PolyLoop raises shares one base class, so a caller can catch them all at once."""

from __future__ import annotations

import pytest

from polyloop import errors
from polyloop.errors import (
    ConfigurationError,
    PolyLoopError,
    SchemaVersionError,
    SerializationError,
    ToolCallRejected,
)


@pytest.mark.parametrize("name", errors.__all__)
def test_every_error_derives_from_the_base_class(name: str) -> None:
    """Each exported error class is a `PolyLoopError` and documents when it is raised."""
    cls = getattr(errors, name)
    assert issubclass(cls, PolyLoopError)
    assert cls.__doc__


@pytest.mark.parametrize(
    "cls", [ConfigurationError, ToolCallRejected, SerializationError, SchemaVersionError]
)
def test_value_errors_stay_value_errors(cls: type[Exception]) -> None:
    """Errors about bad values are also `ValueError`s, as callers of a value-checking API expect."""
    assert issubclass(cls, ValueError)


def test_the_base_class_is_an_exception_not_a_base_exception() -> None:
    """`PolyLoopError` is an `Exception`, so generic handlers see it and cancellation does not."""
    assert issubclass(PolyLoopError, Exception)
