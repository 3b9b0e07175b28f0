"""RunStore implementations: ``polyloop.stores.memory``, ``.jsonl`` and ``.sqlite``."""
