"""The ``polyloop`` command-line tool (kept out of the ``polyloop`` package so core stays lean)."""
