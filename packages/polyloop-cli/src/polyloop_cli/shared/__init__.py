"""What every command stands on: the exit codes and errors, the stores (URLs, opening, damaged
files), loading ``--agent`` factories, and the common options (``--store``, ``--json``)."""
