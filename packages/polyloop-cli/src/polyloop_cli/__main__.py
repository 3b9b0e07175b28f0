"""``python -m polyloop_cli`` is the ``polyloop`` command."""

from polyloop_cli.main import main

main()
