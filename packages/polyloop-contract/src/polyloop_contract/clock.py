"""A deterministic clock for tests, to pass as the ``clock=`` keyword of ``run``/``resume``.

The loop reads its clock once when a step starts and once when the step's record is made, and
records the difference as ``step_wall_ms``. A :class:`TickingClock` moves forward by one fixed
tick on every call and not otherwise, so every step of every run records ``step_wall_ms ==
tick_ms`` however long the model, the parser or the tool really took: a trajectory snapshot
does not change when a tool sleeps, waits on I/O, or a machine is slow. Its UTC time is
fixed (:meth:`TickingClock.utc_iso`), so the ``started_at`` the loop records in ``RunStarted``
is the same in every session too.
"""

from __future__ import annotations

__all__ = ["TickingClock"]


class TickingClock:
    """A zero-argument callable returning seconds; call ``n`` (from 0) returns ``n * tick_ms / 1000``.

    Give each run its own clock (or one per test): two runs driven concurrently with one clock
    would interleave their calls, and a step would span a number of ticks that depends on the
    scheduling. ``tick_ms=0`` is a frozen clock (every step records 0 ms).
    """

    __slots__ = ("_calls", "_tick_ms")

    def __init__(self, tick_ms: int = 1) -> None:
        if isinstance(tick_ms, bool) or not isinstance(tick_ms, int) or tick_ms < 0:
            raise ValueError(
                f"TickingClock(tick_ms={tick_ms!r}): the tick must be a whole, non-negative "
                "number of milliseconds (step_wall_ms is an integer)."
            )
        self._tick_ms = tick_ms
        self._calls = 0

    @property
    def tick_ms(self) -> int:
        """The milliseconds each call adds: the ``step_wall_ms`` of every step."""
        return self._tick_ms

    @property
    def calls(self) -> int:
        """How many times the clock has been read."""
        return self._calls

    #: The UTC time every TickingClock reports: a run it drives records it as ``started_at``.
    UTC_ISO = "2000-01-01T00:00:00+00:00"

    def utc_iso(self) -> str:
        """The fixed UTC time :data:`UTC_ISO`; reading it is not a call of the clock."""
        return self.UTC_ISO

    def __call__(self) -> float:
        # Computed from the count, not accumulated, so that no rounding error builds up.
        now = self._calls * self._tick_ms / 1000
        self._calls += 1
        return now

    def __repr__(self) -> str:
        return f"TickingClock(tick_ms={self._tick_ms}, calls={self._calls})"
