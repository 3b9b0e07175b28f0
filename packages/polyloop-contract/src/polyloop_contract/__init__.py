"""polyloop-contract: a pytest plugin that checks implementations of PolyLoop's seams.

Install it next to your implementation, define the ``polyloop_*`` fixtures in a
``conftest.py`` (see the README), and run ``pytest --polyloop-contract``.

``polyloop_contract.snapshot`` snapshot-tests trajectories with syrupy, in the library's own
JSON, with a deterministic clock; it needs no flag.

Importing this package is cheap: the suites (and hypothesis) load only when the flag is on.
"""

from polyloop_contract.capabilities import STORE_CAPABILITIES, StoreCapabilities
from polyloop_contract.leaks import RefusedStore, find_secret

__all__ = ["STORE_CAPABILITIES", "RefusedStore", "StoreCapabilities", "find_secret"]
