"""The ``polyloop`` command: inspect, verify, plan and export run logs; run the demo.

Every error a user can cause ends in one line on stderr saying what to do, and an exit code of
its class (:class:`~polyloop_cli.shared.errors.ExitCode`); never in a traceback. Set
``POLYLOOP_DEBUG=1`` to get the traceback of an unexpected (internal) error.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import Any

import click

from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.redaction import scrub_error
from polyloop_cli.shared.errors import CliError, ExitCode

__all__ = ["SECTIONS", "cli", "main"]


#: The sections of `polyloop --help`, in order; a command in none is listed under "Other".
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Try it", ("demo",)),
    ("Inspect runs", ("runs", "show", "plan", "verify", "view")),
    ("Export tables", ("export", "steps")),
    ("Decide what a parked run waits for", ("pending", "approve", "reject", "edit", "answer")),
    ("Drive runs with your agent", ("resume", "batch", "fork", "replay")),
    # Added by polyloop-console (the polyloop.commands entry points), or a stub saying so.
    ("Operator console", ("serve", "worker")),
)


class _Sections(click.Group):
    """A group whose help lists its commands by section (:data:`SECTIONS`)."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = [name for name in self.list_commands(ctx) if not self.commands[name].hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        placed = {name for _, members in SECTIONS for name in members}
        sections = [*SECTIONS, ("Other", tuple(name for name in names if name not in placed))]
        for title, members in sections:
            rows = [
                (name, self.commands[name].get_short_help_str(limit))
                for name in members
                if name in names
            ]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


@click.group(cls=_Sections, context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """PolyLoop run logs from the command line.

    Start with `polyloop demo`: an agent run killed with SIGKILL mid-action, then resumed
    (`polyloop demo --approval`: a run that waits for a person's approval). Then inspect its
    runs: `polyloop runs`, `polyloop show RUN_ID`, `polyloop view RUN_ID` (an HTML page),
    `polyloop steps --format csv` (every step as a table). `polyloop pending` lists the runs
    that wait for a person, with the `approve`, `reject`, `edit` or `answer` command that
    decides each; `polyloop resume` continues a run with its agent. Every command takes
    --store URL (default: the demo's store) and --json.
    """


def _register() -> None:
    """Every command has a module of its own; the group only gathers them."""
    from polyloop_cli.commands.answer import answer
    from polyloop_cli.commands.approve import approve
    from polyloop_cli.commands.batch import batch
    from polyloop_cli.commands.edit import edit
    from polyloop_cli.commands.export import export
    from polyloop_cli.commands.fork import fork_command
    from polyloop_cli.commands.pending import pending
    from polyloop_cli.commands.plan import plan
    from polyloop_cli.commands.reject import reject
    from polyloop_cli.commands.replay import replay
    from polyloop_cli.commands.resume import resume
    from polyloop_cli.commands.runs import runs
    from polyloop_cli.commands.show import show
    from polyloop_cli.commands.steps import steps
    from polyloop_cli.commands.verify import verify
    from polyloop_cli.demo.command import demo

    for command in (
        runs,
        show,
        plan,
        verify,
        export,
        demo,
        batch,
        steps,
        pending,
        approve,
        reject,
        edit,
        answer,
        resume,
        replay,
        fork_command,
    ):
        cli.add_command(command)
        _require_given(command)
    _register_installed()


def _require_given(command: click.Command) -> None:
    """Refuse (exit 2, naming it) a required option that was not given, before the command runs.

    The locked click (8.3 and later) takes an explicit ``default=None`` as a value, so
    ``required=True`` alone no longer stops a command whose option was left out; this check,
    made here for every command, does not depend on how an option was declared."""
    callback = command.callback
    if callback is None:
        return

    @functools.wraps(callback)
    def checked(*arguments: Any, **values: Any) -> Any:
        context = click.get_current_context()
        for parameter in command.params:
            if parameter.required and context.params.get(parameter.name or "") is None:
                raise click.MissingParameter(ctx=context, param=parameter)
        return callback(*arguments, **values)

    command.callback = checked


#: Commands another distribution adds (``polyloop serve``, ``worker`` and ``view`` come with
#: polyloop-console: the viewer's pages are its templates); the CLI finds them by this
#: entry-point group and never imports them by name, so it stays light without them.
COMMANDS_GROUP = "polyloop.commands"
#: Where each command of :data:`COMMANDS_GROUP` the CLI knows of comes from.
ADDED_COMMANDS = {
    "view": "polyloop-console",
    "serve": "polyloop-console",
    "worker": "polyloop-console",
}


def _register_installed() -> None:
    from importlib.metadata import entry_points

    for entry in entry_points(group=COMMANDS_GROUP):
        if entry.name in cli.commands:
            continue
        try:
            loaded = entry.load()
        except Exception:
            continue  # a broken plug-in must not take the other commands down; its stub says so
        if isinstance(loaded, click.Command):
            cli.add_command(loaded, entry.name)
            _require_given(loaded)
    for name, distribution in ADDED_COMMANDS.items():
        if name not in cli.commands:
            cli.add_command(_missing(name, distribution))


def _missing(name: str, distribution: str) -> click.Command:
    def refuse() -> None:
        raise CliError(
            ExitCode.USAGE,
            f"`polyloop {name}` comes with the {distribution} distribution, which is not "
            f"installed; `pip install {distribution}` (or `uv add {distribution}`) adds it.",
        )

    return click.Command(
        name,
        callback=refuse,
        help=f"(not installed: `pip install {distribution}` adds it)",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


_register()


# ---------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------


def _report(code: int, kind: str, message: str, as_json: bool) -> None:
    line = scrub_error(" ".join(message.split()))
    if as_json:
        sys.stderr.write(
            json.dumps({"error": {"code": code, "kind": kind, "message": line}}) + "\n"
        )
    else:
        sys.stderr.write(f"polyloop: error: {line}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point; exits with the code of the outcome."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    # The command reports its own errors, one line each. asyncio's child watcher may log a
    # warning when a killed worker is reaped by the transport first ("Unknown child process
    # pid"); that is harmless and would break the one-line contract of stderr.
    logging.getLogger("asyncio").setLevel(logging.ERROR)
    try:
        result = cli.main(args=args, prog_name="polyloop", standalone_mode=False)
    except CliError as error:
        _report(int(error.code), error.kind, error.line, as_json)
        sys.exit(int(error.code))
    except click.exceptions.NoArgsIsHelpError as error:
        # Bare `polyloop`: the help is the answer, not an error.
        sys.stdout.write(error.format_message() + "\n")
        sys.exit(0)
    except click.exceptions.UsageError as error:
        hint = ""
        if error.ctx is not None:
            words = error.ctx.command_path.split()[1:]
            hint = f" (see `{suggest(*words, '--help')}`)"
        _report(int(ExitCode.USAGE), "usage", error.format_message() + hint, as_json)
        sys.exit(int(ExitCode.USAGE))
    except click.exceptions.Abort:
        _report(130, "interrupted", "interrupted.", as_json)
        sys.exit(130)
    except click.ClickException as error:
        _report(error.exit_code, "usage", error.format_message(), as_json)
        sys.exit(error.exit_code)
    except KeyboardInterrupt:
        _report(130, "interrupted", "interrupted.", as_json)
        sys.exit(130)
    except BrokenPipeError:
        # The reader went away (e.g. `polyloop export … | head`): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(0)
    except Exception as error:
        if os.environ.get("POLYLOOP_DEBUG"):
            sys.stderr.write(scrub_error(traceback.format_exc()))
        bug = CliError(
            ExitCode.INTERNAL,
            f"unexpected {type(error).__name__}: this is a bug in polyloop; rerun with "
            "POLYLOOP_DEBUG=1 for the traceback and report it.",
            detail=str(error),
        )
        _report(int(bug.code), "internal", bug.line, as_json)
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(result if isinstance(result, int) else 0)


if __name__ == "__main__":
    main()
