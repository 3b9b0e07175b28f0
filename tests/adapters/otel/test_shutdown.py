"""``OtlpTelemetry.shutdown`` keeps its promise: it returns within the export timeout, however
many batches wait and whatever the collector does (a bound on time: runs alone, see
tests/serial_group.py)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from polyloop.adapters.otel import OtlpTelemetry
from tests.adapters.gateway._server import closed_port


@contextlib.contextmanager
def _mute_collector() -> Iterator[int]:
    """A real listener that accepts every connection, reads nothing and never answers."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(listener.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        thread.join()
        for connection in held:
            connection.close()
        listener.close()


@pytest.mark.parametrize("collector", ["dead", "mute"])
def test_shutdown_returns_within_the_export_timeout_whatever_the_collector_does(
    collector: str,
) -> None:
    """2,000 spans queued in batches of 10 for a collector that is gone (closed port) or never
    answers: shutdown, with a 1 s export timeout, returns well within 10 s (the SDK alone waits
    up to 30 s), giving up what it could not send."""
    with _mute_collector() as mute_port:
        port = closed_port() if collector == "dead" else mute_port
        telemetry = OtlpTelemetry(
            f"http://127.0.0.1:{port}",
            export_interval_seconds=60.0,
            export_timeout_seconds=1.0,
            max_export_batch_size=10,
        )
        tracer = telemetry.tracer_provider.get_tracer("test")
        for _ in range(2000):
            tracer.start_span("queued").end()
        began = time.monotonic()
        telemetry.shutdown()
        took = time.monotonic() - began
    # The bound is the promise under test; 10 s leaves room for a loaded machine.
    assert took < 10.0, f"shutdown took {took:.1f} s with a 1 s export timeout"
    assert telemetry.export_failures >= 1
