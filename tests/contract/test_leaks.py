"""find_secret looks wherever an error reporter looks: chain, attributes, traceback frames."""

from __future__ import annotations

import pytest

from polyloop_contract import RefusedStore, find_secret

SECRET = "hunter2-in-the-chain"


class Driver(Exception):
    def __init__(self, message: str, options: object) -> None:
        super().__init__(message)
        self.options = options


class Connection:
    """An object holding the password behind a property, like psycopg's PGconn."""

    def __init__(self, password: str) -> None:
        self._password = password

    def __repr__(self) -> str:
        return "<Connection>"

    @property
    def password(self) -> bytes:
        return self._password.encode()


def _caught(function: object) -> BaseException:
    try:
        function()  # type: ignore[operator]
    except BaseException as error:
        return error
    raise AssertionError("nothing raised")


def _from_none() -> None:
    try:
        raise Driver("authentication failed", {"dsn": f"password={SECRET}"})
    except Driver:
        raise ValueError("cannot connect") from None


def _outside() -> None:
    try:
        raise Driver("authentication failed", {"dsn": f"password={SECRET}"})
    except Driver as error:
        reason = str(error)
    raise ValueError(f"cannot connect ({reason})")


def _local_holds_it() -> None:
    conninfo = f"host=db password={SECRET}"
    assert conninfo
    raise ValueError("cannot connect")


def test_a_clean_error_raised_outside_the_except_block_is_clean() -> None:
    """Raised after the except block: no chain, nothing to find."""
    assert None is find_secret(_caught(_outside), (SECRET,))


def test_from_none_still_leaves_the_driver_error_as_context() -> None:
    """`from None` hides the context from printed tracebacks only: the search finds it."""
    where = find_secret(_caught(_from_none), (SECRET,))
    assert "the error.__context__ (Driver): attribute options" == where


def test_a_cause_and_a_group_member_are_searched() -> None:
    """__cause__ and the members of an exception group are followed."""
    inner = Driver("x", None)
    inner.add_note(f"dsn password={SECRET}")
    outer = RuntimeError("y")
    outer.__cause__ = inner
    assert "the error.__cause__ (Driver): its __notes__" == find_secret(outer, (SECRET,))
    group = ExceptionGroup("many", [ValueError("fine"), Driver("z", [Connection(SECRET)])])
    where = find_secret(group, (SECRET,))
    assert where in {
        f"the error.exceptions[1] (Driver): attribute options[0].{name}"
        for name in ("password", "_password")
    }


def test_a_local_variable_of_a_frame_in_the_traceback_is_searched() -> None:
    """A connection string in a local of a frame the error passed through is found, and
    named by variable and function; the frame that caught the error is the caller's."""
    where = find_secret(_caught(_local_holds_it), (SECRET,))
    assert where is not None
    assert "local variable 'conninfo' of _local_holds_it()" in where
    mine = SECRET  # a local of the catching frame (this one): the caller's own business
    with pytest.raises(ValueError, match="caught right here") as caught:
        raise ValueError("caught right here")
    assert mine
    assert None is find_secret(caught.value, (SECRET,))


def test_a_refused_store_needs_its_secrets_and_hides_them() -> None:
    """RefusedStore refuses to be built without the secrets, and its repr hides them."""
    with pytest.raises(ValueError, match="needs the secrets"):
        RefusedStore(lambda: None, secrets=())
    assert SECRET not in repr(RefusedStore(lambda: None, secrets=(SECRET,)))
