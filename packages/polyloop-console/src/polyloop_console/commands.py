"""``polyloop serve`` and ``polyloop worker`` (also ``polyloop-console serve|worker``).

The ``polyloop`` command finds these through the entry-point group ``polyloop.commands``, so
it never imports this distribution by name: ``pip install polyloop-cli`` stays without a web
server, and says to install ``polyloop-console`` when ``serve`` is asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import click

from polyloop.listing import OverviewQuery, supports_run_overviews
from polyloop_cli.shared.command_kit import STORE_AS_FOR_RUNS, StoreChoice, store_choice
from polyloop_cli.shared.errors import CliError, ExitCode
from polyloop_cli.shared.stores import list_run_ids, open_store, polyloop_home
from polyloop_console.auth import TokenError, Tokens, first_start_token, tokens_from_file
from polyloop_console.driving import Agent, work

__all__ = ["main", "serve", "worker"]

LOG = logging.getLogger("polyloop.console")


def _token_directory(choice: StoreChoice) -> Path:
    """Beside a file store; in ``POLYLOOP_HOME`` for any other."""
    path = choice.url.path
    if path is None:
        return polyloop_home()
    return path if path.is_dir() else path.parent


def _tokens(choice: StoreChoice, tokens_file: Path | None) -> tuple[Tokens, str | None, Path]:
    try:
        if tokens_file is not None:
            return tokens_from_file(tokens_file), None, tokens_file
        directory = _token_directory(choice)
        tokens, made = first_start_token(directory)
        return tokens, made, directory / "console-token"
    except TokenError as error:
        raise CliError(ExitCode.USAGE, str(error)) from None


def _host_names(host: str, loopback: bool) -> list[str] | None:
    """The names a request's ``Host`` may give: on loopback, only loopback names; elsewhere
    any (a proxy in front names the console as it likes)."""
    if not loopback:
        return None
    return sorted({host, "localhost", "127.0.0.1", "::1", "[::1]"})


def _agent(spec: str | None, episode_json: str | None) -> Agent | None:
    return None if spec is None else Agent(spec, episode_json)


def _logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("polyloop.console")
    if not logger.handlers:
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)


_AGENT_HELP = (
    "The callable that builds a run's agent, factory(episode, store), as for `polyloop resume`: "
    "given, a run goes on by itself right after a decision, and edits are checked against its "
    "tools' schemas."
)


@click.command()
@click.option("--store", "store", metavar="URL", default=None, help=STORE_AS_FOR_RUNS)
@click.option("--agent", "agent", metavar="MODULE:FACTORY", default=None, help=_AGENT_HELP)
@click.option(
    "--episode",
    "episode_json",
    metavar="JSON",
    default=None,
    help="The episode's data the factory reads, a JSON object (its run_id is set per run).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--tokens",
    "tokens_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help='A JSON file {"person": "token", …}: who may sign in (the person is recorded as '
    "decided_by). Default: one token made at the first start, kept beside the store (mode 0600).",
)
def serve(
    store: str | None,
    agent: str | None,
    episode_json: str | None,
    host: str,
    port: int,
    tokens_file: Path | None,
) -> None:
    """The operator console: a local web app to approve, edit, reject or answer what runs
    wait for, and to list runs. Listens on 127.0.0.1 unless --host says otherwise; every
    page needs a signed-in person."""
    import uvicorn

    from polyloop_console.app import Console, build_app

    choice = store_choice(store)
    _logging()
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        click.echo(
            f"warning: listening on {host}, not on loopback: use a TLS-terminating proxy in "
            "front of it; tokens and session cookies travel in clear over plain HTTP.",
            err=True,
        )

    async def go() -> None:
        async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:
            # The store first: no token is made for a store that is not there.
            tokens, made, where = _tokens(choice, tokens_file)
            if made is not None:
                click.echo(f"A sign-in token was made and kept in {where} (mode 0600); shown once:")
                click.echo(f"  {made}")
            console = Console(opened, choice.url, tokens, _agent(agent, episode_json))
            config = uvicorn.Config(
                build_app(console, _host_names(host, loopback)),
                host=host,
                port=port,
                log_level="warning",
                lifespan="off",
            )
            server = uvicorn.Server(config)
            click.echo(f"PolyLoop console for {choice.url} at http://{host}:{port}/", err=False)
            sys.stdout.flush()
            try:
                await server.serve()
            finally:
                for task in list(console.resumes):
                    task.cancel()
                if console.live is not None:
                    await console.live.aclose()

    asyncio.run(go())


@click.command()
@click.option("--store", "store", metavar="URL", default=None, help=STORE_AS_FOR_RUNS)
@click.option("--agent", "agent", metavar="MODULE:FACTORY", required=True, help=_AGENT_HELP)
@click.option(
    "--episode",
    "episode_json",
    metavar="JSON",
    default=None,
    help="The episode's data the factory reads, a JSON object (its run_id is set per run).",
)
@click.option("--poll", "poll_seconds", default=1.0, show_default=True, type=click.FloatRange(0.05))
@click.option("--once", is_flag=True, help="One pass over the store, then exit.")
def worker(
    store: str | None, agent: str, episode_json: str | None, poll_seconds: float, once: bool
) -> None:
    """Continue every run a person decided in that waits on no ask and has not finished (its
    decision not carried out yet, or its driver died after), each under its run lease (a run
    another driver holds is skipped: it is that driver's), until stopped. Each --poll it reads
    only the runs written since it last read them; on PostgreSQL a write wakes it at once."""
    choice = store_choice(store)
    _logging()

    async def go() -> None:
        async with open_store(choice.url, missing_advice=choice.missing_advice) as opened:

            async def run_ids() -> Sequence[str]:
                if not supports_run_overviews(opened):
                    return (await list_run_ids(opened, choice.url)).run_ids
                # Only an unfinished run can wait for a decision to be carried out; a store
                # with overviews (design 0070) names those without reading every log.
                found: list[str] = []
                after = None
                while True:
                    page = await opened.run_overviews(
                        OverviewQuery(status="unfinished", after=after, limit=1000)
                    )
                    found += [each.run_id for each in page]
                    if len(page) < 1000:
                        return found
                    after = page[-1].run_id

            click.echo(f"PolyLoop worker on {choice.url}: continuing decided runs.")
            sys.stdout.flush()
            await work(
                opened, Agent(agent, episode_json), run_ids, poll_seconds=poll_seconds, once=once
            )

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(go())


def main(argv: Sequence[str] | None = None) -> None:
    """``polyloop-console``: the same commands, reporting errors as ``polyloop`` does."""
    from polyloop_cli.main import main as polyloop_main

    polyloop_main(argv)
