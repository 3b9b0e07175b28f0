"""What the commands print and how: the output (tables, ``--json``, the width), the pasteable
commands they suggest, asks in words, the summaries computed from a log, the secrets scrubbed
from everything shown. Imports neither the commands nor the demo."""
