"""``LeaseHolder``, the one value both :mod:`polyloop.ports` and :mod:`polyloop.errors` need.

It lives in a module of its own because ``errors`` sits below ``types`` and ``ports`` (both
import it), while ``RunLeaseHeldError`` carries a holder. ``polyloop.ports`` re-exports it:
import it from there.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

__all__ = ["LeaseHolder"]


@dataclass(frozen=True, slots=True)
class LeaseHolder:
    """Who holds a run's lease, as far as the store can tell; what it cannot tell is ``None``.

    Re-exported by :mod:`polyloop.ports`, where it belongs with the seam it answers for.
    """

    #: Process id of the holder on its host.
    process_id: int | None = None
    #: Host name of the holder's machine.
    host_name: str | None = None
    #: When the lease was acquired, ISO 8601 in UTC (``2026-12-01T10:00:00Z``).
    acquired_at: str | None = None

    @classmethod
    def of_this_process(cls) -> LeaseHolder:
        """This process, on this host, from now (what a store records when it takes a lease)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return cls(process_id=os.getpid(), host_name=socket.gethostname(), acquired_at=now)

    def describe(self) -> str:
        """``"process 4711 on host worker-3 since 2026-12-01T10:00:00Z"``, with what is known."""
        parts = []
        if self.process_id is not None:
            parts.append(f"process {self.process_id}")
        if self.host_name is not None:
            parts.append(f"on host {self.host_name}")
        if self.acquired_at is not None:
            parts.append(f"since {self.acquired_at}")
        return " ".join(parts) if parts else "a holder the store cannot name"
