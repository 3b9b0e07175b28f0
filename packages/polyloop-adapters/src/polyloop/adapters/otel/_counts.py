"""Counts kept in plain dictionaries and reported through observable instruments, one set per
meter provider (design 0049).

Two reasons. An observable instrument registered twice under one name keeps only the first
callbacks (the SDK drops the second silently), so every sink and batch observer on a provider
must share one registration. And adding to a dictionary costs the loop a fraction of a
microsecond, where a synchronous counter's ``add`` costs several: the SDK reads the counts
when its reader collects, on its own thread.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Observation

__all__ = ["Key", "SharedCounts", "key", "shared_counts"]

#: An attribute set, hashable: its items in a fixed order.
Key = tuple[tuple[str, str | bool | int], ...]

_SCOPE = "polyloop.adapters.otel"
_LOCK = threading.Lock()
_BY_PROVIDER: weakref.WeakKeyDictionary[Any, SharedCounts] = weakref.WeakKeyDictionary()


def key(attributes: Mapping[str, str | bool | int]) -> Key:
    """The hashable form of an attribute set."""
    return tuple(sorted(attributes.items()))


class SharedCounts:
    """Monotonic counts (observable counters) and last values (observable gauges) by name and
    attribute set, for one meter."""

    def __init__(self, meter: metrics.Meter) -> None:
        self.meter = meter
        self._sums: dict[str, dict[Key, float]] = {}
        self._lasts: dict[str, dict[Key, float]] = {}
        self._lock = threading.Lock()

    def counter(self, name: str, unit: str, description: str) -> dict[Key, float]:
        """The counts of counter ``name`` (registered on first use): add to them in place."""
        with self._lock:
            if name not in self._sums:
                self._sums[name] = {}
                self.meter.create_observable_counter(
                    name,
                    callbacks=[self._observer(self._sums[name])],
                    unit=unit,
                    description=description,
                )
            return self._sums[name]

    def gauge(self, name: str, unit: str, description: str) -> dict[Key, float]:
        """The last values of gauge ``name`` (registered on first use): set them in place."""
        with self._lock:
            if name not in self._lasts:
                self._lasts[name] = {}
                self.meter.create_observable_gauge(
                    name,
                    callbacks=[self._observer(self._lasts[name])],
                    unit=unit,
                    description=description,
                )
            return self._lasts[name]

    @staticmethod
    def _observer(values: dict[Key, float]) -> Any:
        def observe(options: CallbackOptions) -> Iterable[Observation]:
            # A copy first: the loop's thread may add a key meanwhile.
            return [
                Observation(value, dict(attributes)) for attributes, value in list(values.items())
            ]

        return observe


def shared_counts(meter_provider: metrics.MeterProvider | None) -> SharedCounts:
    """The one :class:`SharedCounts` of ``meter_provider`` (``None``: the global provider)."""
    provider = metrics.get_meter_provider() if meter_provider is None else meter_provider
    with _LOCK:
        counts = _BY_PROVIDER.get(provider)
        if counts is None:
            counts = SharedCounts(metrics.get_meter(_SCOPE, meter_provider=provider))
            _BY_PROVIDER[provider] = counts
        return counts
