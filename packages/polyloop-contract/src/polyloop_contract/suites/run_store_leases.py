"""RunStore contract, run leases: for stores that implement ``polyloop.ports.RunLeasing``.

The capability is decided structurally: a store that does not implement it skips these rules
with one report line saying so (exclusivity of a run's driver across processes is then the
store's own business); a store may also declare capability ``leases`` off. Each failure
message starts with ``RunStore rule '<rule>'``.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import os
import pickle
import signal
import sys
import time

import pytest

from polyloop.errors import RunLeaseHeldError
from polyloop.ports import LeaseHolder, RunLease, RunLeasing, RunStore, StoreClosing
from polyloop_contract import _report
from polyloop_contract._checks import CALL_TIMEOUT, Rule, shown
from polyloop_contract.capabilities import StoreCapabilities
from polyloop_contract.fixtures import StoreChildOpener, missing
from polyloop_contract.suites import _store_support
from polyloop_contract.suites._store_support import (
    SEAM,
    MakeStore,
    Reopen,
    aio,
    param_suffix,
    require_capability,
)

#: The fixtures every store suite shares (pytest finds a fixture by its name in the module).
reopen = _store_support.reopen
store_scope = _store_support.store_scope

#: How soon after its holder was SIGKILLed a lease must be free again.
FREED_WITHIN_SECONDS = 1.0


leasing_store = _store_support.capability_store_fixture(
    "leasing_store",
    declared="leases",
    seam=RunLeasing,
    rules="lease",
    without="so the loop refuses a second driver only on the same store object in one process",
)


async def _take(rule: Rule, store: RunLeasing, run_id: str, whom: str) -> RunLease:
    lease = await rule.call(
        f"acquire_run_lease({shown(run_id)}) on {whom}", store.acquire_run_lease(run_id)
    )
    rule.check(
        isinstance(lease, RunLease) and lease.run_id == run_id,
        f"acquire_run_lease({shown(run_id)}) on {whom} returned {lease!r}: it must return a RunLease "
        f"(run_id property, async release()) whose run_id is {shown(run_id)}",
    )
    return lease


async def _refused(rule: Rule, store: RunLeasing, run_id: str, whom: str, why: str) -> None:
    try:
        lease = await asyncio.wait_for(store.acquire_run_lease(run_id), CALL_TIMEOUT)
    except RunLeaseHeldError as error:
        rule.check(
            error.run_id == run_id,
            f"acquire_run_lease({shown(run_id)}) on {whom} raised RunLeaseHeldError for run "
            f"{error.run_id!r}, not {shown(run_id)}",
        )
        return
    except TimeoutError:
        rule.fail(
            f"acquire_run_lease({shown(run_id)}) on {whom} waited {CALL_TIMEOUT:g} s; it must "
            "never wait: refuse at once with RunLeaseHeldError"
        )
    except Exception as error:
        rule.fail(
            f"acquire_run_lease({shown(run_id)}) on {whom} {why} raised {type(error).__name__}: "
            f"{error}; it must raise polyloop.errors.RunLeaseHeldError"
        )
    await lease.release()
    rule.fail(
        f"acquire_run_lease({shown(run_id)}) on {whom} {why} was granted; it must be refused "
        "with RunLeaseHeldError (two drivers of one run would repeat its side effects)"
    )


async def _holder(rule: Rule, store: RunLeasing, run_id: str, whom: str) -> LeaseHolder | None:
    holder = await rule.call(
        f"run_lease_holder({shown(run_id)}) on {whom}", store.run_lease_holder(run_id)
    )
    rule.check(
        holder is None or isinstance(holder, LeaseHolder),
        f"run_lease_holder({shown(run_id)}) on {whom} returned {holder!r}; it must return a "
        "polyloop.ports.LeaseHolder or None",
    )
    return holder


async def _close(rule: Rule, store: RunStore) -> bool:
    """Close ``store`` the way its class offers; ``False`` when it offers no way."""
    if isinstance(store, StoreClosing):
        await rule.call("aclose() of the store holding the lease", store.aclose())
        return True
    close = getattr(store, "close", None)
    if not callable(close):
        return False
    if inspect.iscoroutinefunction(close):
        await rule.call("close() of the store holding the lease", close())
    else:
        await rule.call("close() of the store holding the lease", asyncio.to_thread(close))
    return True


# ---------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------


@aio
async def test_a_held_lease_is_refused_on_the_same_store_object(leasing_store: MakeStore) -> None:
    """While a run's lease is held, the same store object refuses it and says it is held."""
    rule = Rule(SEAM, "a held lease is refused")
    store = await leasing_store()
    assert isinstance(store, RunLeasing)
    rule.check(
        await _holder(rule, store, "leased", "a fresh store") is None,
        "run_lease_holder('leased') on a fresh store named a holder; nobody holds it yet",
    )
    lease = await _take(rule, store, "leased", "a fresh store")
    await _refused(rule, store, "leased", "the same store object", "while it is held")
    rule.check(
        await _holder(rule, store, "leased", "the store holding it") is not None,
        "run_lease_holder('leased') answered None while the lease is held; it must name the "
        "holder (LeaseHolder() when it cannot tell who)",
    )
    other = await _take(rule, store, "another-run", "the same store object")
    await rule.call("release() of the lease of 'another-run'", other.release())
    await rule.call("release() of the lease of 'leased'", lease.release())


@aio
async def test_a_held_lease_is_refused_to_a_second_store_object(
    leasing_store: MakeStore, reopen: Reopen
) -> None:
    """Another store object on the same storage (as another process would open) is refused a
    held lease, sees it held, and can take it once it is released."""
    rule = Rule(SEAM, "a held lease is refused to a second store object on the same storage")
    first = await leasing_store()
    second = await reopen(first)
    assert isinstance(first, RunLeasing)
    second_leasing = _leasing_or_fail(rule, second)
    lease = await _take(rule, first, "shared", "the first store object")
    await _refused(
        rule, second_leasing, "shared", "a second store object", "while the first holds it"
    )
    rule.check(
        await _holder(rule, second_leasing, "shared", "the second store object") is not None,
        "run_lease_holder('shared') on a second store object answered None while the first "
        "holds the lease",
    )
    await _refused(rule, second_leasing, "shared", "a second store object", "after looking at it")
    await rule.call("release() by the first store object", lease.release())
    again = await _take(rule, second_leasing, "shared", "the second store object, after release")
    await rule.call("release() by the second store object", again.release())


def _leasing_or_fail(rule: Rule, store: RunStore) -> RunLeasing:
    rule.check(
        isinstance(store, RunLeasing),
        f"polyloop_store_reopen returned a {type(store).__name__}, which does not implement "
        "RunLeasing although the factory's store does",
    )
    return store  # type: ignore[return-value]


@aio
async def test_a_lease_is_free_again_after_release(leasing_store: MakeStore) -> None:
    """After release nobody holds the lease, releasing again does nothing, and it can be taken."""
    rule = Rule(SEAM, "a lease is free again after release")
    store = await leasing_store()
    assert isinstance(store, RunLeasing)
    lease = await _take(rule, store, "released", "a fresh store")
    await rule.call("release()", lease.release())
    await rule.call("release() a second time (must do nothing)", lease.release())
    holder = await _holder(rule, store, "released", "the store after release")
    rule.check(holder is None, f"after release(), run_lease_holder still names {holder!r}")
    again = await _take(rule, store, "released", "the same store, after release")
    await rule.call("release() of the lease taken again", again.release())


@aio
async def test_a_lease_is_free_again_after_its_store_is_closed(
    request: pytest.FixtureRequest, leasing_store: MakeStore, reopen: Reopen
) -> None:
    """Closing the store object that holds a lease gives the lease back."""
    rule = Rule(SEAM, "a lease is free again after close")
    first = await leasing_store()
    second = _leasing_or_fail(rule, await reopen(first))
    assert isinstance(first, RunLeasing)
    lease = await _take(rule, first, "closed", "the first store object")
    if not await _close(rule, first):
        message = (
            f"RunStore rule 'a lease is free again after close' did not apply"
            f"{param_suffix(request)}: {type(first).__name__} has neither aclose() nor close()"
        )
        _report.note(request.config, f"NOT APPLICABLE {message}")
        await lease.release()
        pytest.skip(message)
    holder = await _holder(rule, second, "closed", "a second store object")
    rule.check(
        holder is None,
        f"the store object holding the lease of 'closed' was closed, yet a second store object "
        f"still sees it held by {holder!r}; closing must give back every lease it holds",
    )
    again = await _take(rule, second, "closed", "a second store object after the close")
    await rule.call("release() by the second store object", again.release())
    await rule.call("release() of the closed store's lease (must do nothing)", lease.release())


@aio
async def test_a_lease_is_free_within_a_second_after_its_holder_is_killed(
    request: pytest.FixtureRequest,
    leasing_store: MakeStore,
    polyloop_store_child_opener: StoreChildOpener | None,
    polyloop_store_capabilities: StoreCapabilities,
) -> None:
    """A child process takes the lease through the child opener; while it lives the lease is
    refused here; once it is SIGKILLed the lease is free within one second (no TTL)."""
    require_capability(request, polyloop_store_capabilities, "reopen")
    if polyloop_store_child_opener is None:
        missing(
            request,
            "polyloop_store_child_opener",
            "RunStore lease (killed holder)",
            "a callable that takes a store the factory returned and returns a picklable "
            "zero-argument callable opening a store on the same storage in another process, "
            "e.g. functools.partial(MyStore, path)",
        )
    if not hasattr(signal, "SIGKILL"):  # pragma: no cover - Windows
        pytest.skip("RunStore rule 'a lease is freed when its holder dies' needs SIGKILL")
    held = Rule(SEAM, "a lease held in another process is refused")
    freed = Rule(SEAM, "a lease is free within one second after its holder is SIGKILLed")
    store = await leasing_store()
    assert isinstance(store, RunLeasing)
    try:
        opener = polyloop_store_child_opener(store)
        payload = base64.b64encode(pickle.dumps((opener, "killed-holder")))
    except Exception as error:
        held.fail(
            f"polyloop_store_child_opener(store) must return a picklable zero-argument "
            f"callable; pickling it raised {type(error).__name__}: {error}"
        )
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "polyloop_contract._lease_holder",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
    )
    try:
        assert child.stdin is not None
        assert child.stdout is not None
        child.stdin.write(payload + b"\n")
        await child.stdin.drain()
        try:
            line = (await asyncio.wait_for(child.stdout.readline(), CALL_TIMEOUT)).decode()
        except TimeoutError:
            held.fail(
                f"the child opening the store did not take the lease within {CALL_TIMEOUT:g} s"
            )
        held.check(
            line.startswith("held "),
            f"the child could not take the lease of 'killed-holder': {line.strip() or 'it died'}",
        )
        await _refused(
            held, store, "killed-holder", "this process", "while a child process holds it"
        )
        holder = await _holder(held, store, "killed-holder", "this process")
        held.check(
            holder is not None, "run_lease_holder answered None while a child process holds it"
        )
        child.kill()
        await child.wait()
        killed_at = time.monotonic()
        lease = await _taken_within(freed, store, "killed-holder", killed_at + FREED_WITHIN_SECONDS)
        await freed.call("release() of the freed lease", lease.release())
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()


async def _taken_within(rule: Rule, store: RunLeasing, run_id: str, deadline: float) -> RunLease:
    while True:
        try:
            return await asyncio.wait_for(store.acquire_run_lease(run_id), CALL_TIMEOUT)
        except RunLeaseHeldError as error:
            if time.monotonic() >= deadline:
                rule.fail(
                    f"{FREED_WITHIN_SECONDS:g} s after the process holding the lease of "
                    f"{shown(run_id)} was SIGKILLed it is still refused ({error}); the operating "
                    "system or server must free a dead holder's lease, with no TTL to wait out"
                )
        except Exception as error:
            rule.fail(f"acquire_run_lease({shown(run_id)}) raised {type(error).__name__}: {error}")
        await asyncio.sleep(0.02)
