"""The ``polyloop`` commands, one module each, and what only they share (the deciding commands'
common path, a run's lineage and conversation). :mod:`polyloop_cli.main` gathers them."""
