"""PolyLoop: governed, durable agent runs.

Only the five public modules are re-exported here; stores and adapters are separate
distributions that must be imported explicitly (``import polyloop.stores.sqlite``).
"""

# ``polyloop`` is split over several distributions (polyloop-stores, polyloop-adapters add
# subpackages). A regular package would shadow their directories in an editable workspace,
# so the package path is extended over every ``polyloop`` directory on ``sys.path``.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

from polyloop import ports, serialization, session, tools, types

__all__ = ["ports", "serialization", "session", "tools", "types"]
