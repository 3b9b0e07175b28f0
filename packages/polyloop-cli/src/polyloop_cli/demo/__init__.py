"""``polyloop demo``: the crash-and-resume demo and its approval variant, the demo's agent and
task, and the worker process the demo kills. Only the commands and :mod:`polyloop_cli.main`
import it."""
