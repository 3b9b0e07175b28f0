"""``polyloop view``: a run's trajectory as one self-contained HTML page, or every run of a store
as a list of pages (designs 0048, 0071); a fork's page beside it, its steps side by side with its
source's. The pages are :mod:`polyloop_console.viewer.pages`'. The command comes with
polyloop-console; the ``polyloop`` command finds it through the ``polyloop.commands`` entry
points.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import re
from pathlib import Path

import click

from polyloop.errors import PolyLoopError
from polyloop.ports import RunLog, RunStore
from polyloop.session import rebuilt_prompt
from polyloop_cli.rendering.inspection import run_summary
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output
from polyloop_cli.rendering.tokens import run_tokens
from polyloop_cli.shared.agents import opened_agent
from polyloop_cli.shared.command_kit import (
    STORE_AS_FOR_RUNS,
    json_option_saying,
    output_option,
    store_choice,
    store_option_saying,
)
from polyloop_cli.shared.errors import CliError, ExitCode, shown_id
from polyloop_cli.shared.stores import (
    StoreUrl,
    damaged_message,
    list_run_ids,
    open_store,
    read_run,
    salvage,
)
from polyloop_console.viewer.lineage import ComparePage, Lineage, read_lineage
from polyloop_console.viewer.pages import (
    RunEntry,
    RunPage,
    compare_page,
    index_page,
    run_page,
)

__all__ = ["compare_path", "default_page", "page_name", "view"]

#: The page of every run lives here, under the directory of ``view --all``.
RUNS_DIRECTORY = "runs"
#: The side-by-side page of every fork whose source is in the store, under that directory.
COMPARE_DIRECTORY = "compare"


def page_name(run_id: str) -> str:
    """A file name for ``run_id``'s page: its safe characters, then a digest (any run_id)."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", run_id)[:40].strip("-") or "run"
    digest = hashlib.sha256(run_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{slug}.{digest}.html"


#: A run id that is a file name as it is (no path, no hidden file, no shell quoting needed).
_PLAIN_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,99}")


def default_page(run_id: str) -> Path:
    """Where ``view RUN_ID`` writes without -o: ``./RUN_ID.html`` for a run id of letters,
    digits, ``.``, ``-`` and ``_``; any other, :func:`page_name`."""
    if _PLAIN_ID.fullmatch(run_id):
        return Path(f"{run_id}.html")
    return Path(page_name(run_id))


def compare_path(page: Path) -> Path:
    """Where ``view FORK -o PAGE`` writes the fork's side-by-side page: beside PAGE, its name
    with ``.compare`` before the suffix (``fork.html`` → ``fork.compare.html``)."""
    return page.with_name(f"{page.stem}.compare{page.suffix or '.html'}")


def _write(path: Path, html: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        partial.write_text(html, encoding="utf-8")
        os.replace(partial, path)
    except OSError as error:
        raise CliError(
            ExitCode.STORE_UNREADABLE,
            f"cannot write {path} ({error.strerror}); choose a writable -o path.",
        ) from None


#: How an agent is named: ``(MODULE:FACTORY, --episode JSON or None)``.
Agent = tuple[str, str | None]


async def _with_agent(page: RunPage, store: RunStore, agent: Agent | None) -> RunPage:
    """``page`` with the messages rebuilt from the agent's request and the agent's parser
    (design 0061); unchanged without an agent or for a log that could not be read whole."""
    if agent is None or page.damage is not None or page.log.started is None:
        return page
    spec, episode_json = agent
    async with opened_agent(spec, episode_json, page.run_id, store) as built:
        parser = built.definition.decision_parser
        try:
            prompt = await rebuilt_prompt(store, built.request, page.log)
        except PolyLoopError as error:
            problem = " ".join(str(error).split())
            return dataclasses.replace(page, agent=spec, parser=parser, prompt_problem=problem)
    return dataclasses.replace(page, prompt=prompt, agent=spec, parser=parser)


async def _read(
    url: StoreUrl, run_id: str, advice: str, agent: Agent | None, compare: Path
) -> RunPage:
    """The run's page; a fork's with its lineage (its sources named, no link: their pages are
    not written) and, when its source is in the store, a link to ``compare``."""
    async with open_store(url, missing_advice=advice) as store:
        read = await read_run(store, url, run_id)
        if read.damage is None:
            lineage = await read_lineage(store, read.log)
            page = RunPage(
                run_id,
                read.log,
                str(url),
                lineage=lineage,
                compare_href=None if _no_source(lineage) else compare.name,
            )
            return await _with_agent(page, store, agent)
        saved = await salvage(store, url, run_id)
        return RunPage(run_id, saved.log, str(url), read.damage, saved.unreadable)


def _no_source(lineage: Lineage | None) -> bool:
    return lineage is None or lineage.source is None


def _compare_html(
    page: RunPage, fork_href: str | None, index_href: str | None = None
) -> str | None:
    """The fork's side-by-side page, or ``None`` for a run that is no fork or whose source
    is not in the store."""
    lineage = page.lineage
    if lineage is None or lineage.source is None:
        return None
    return compare_page(
        ComparePage(
            page.run_id, page.log, lineage.source, lineage, page.store, fork_href, index_href
        )
    )


def _task_line(page: RunPage) -> str:
    """The run's task in one line for the list: the rebuilt goal's last message, or a
    follow-up's input; ``""`` when the log does not say (design 0061)."""
    if page.prompt is not None and page.prompt.goal_messages:
        last = page.prompt.prefix[-1]
        return " ".join("".join(block.text for block in last.content).split())[:200]
    started = page.log.started
    if started is not None and started.queued_input is not None:
        return " ".join(started.queued_input.split())[:200]
    return ""


def _sibling_page(run_id: str) -> str:
    """A run's page as linked from a page in ``runs/`` or ``compare/`` of ``view --all``."""
    return f"../{RUNS_DIRECTORY}/{page_name(run_id)}"


async def _write_all(
    url: StoreUrl, directory: Path, advice: str, agent: Agent | None
) -> tuple[int, list[str], list[str]]:
    """Every run's page and the list; returns (runs, damaged run ids, unreadable units)."""
    entries: list[RunEntry] = []
    damaged: list[str] = []
    async with open_store(url, missing_advice=advice) as store:
        listing = await list_run_ids(store, url)
        for run_id in listing.run_ids:
            read = await read_run(store, url, run_id)
            name = f"{RUNS_DIRECTORY}/{page_name(run_id)}"
            compare = f"{COMPARE_DIRECTORY}/{page_name(run_id)}"
            lineage = None
            if read.damage is None:
                lineage = await read_lineage(store, read.log, _sibling_page)
            page = RunPage(
                run_id,
                read.log,
                str(url),
                index_href="../index.html",
                lineage=lineage,
                compare_href=None if _no_source(lineage) else f"../{compare}",
            )
            page = await _with_agent(page, store, agent)
            if read.damage is not None:
                damaged.append(run_id)
                saved = await salvage(store, url, run_id)
                page = RunPage(
                    run_id, saved.log, str(url), read.damage, saved.unreadable, "../index.html"
                )
            await asyncio.to_thread(_write, directory / name, run_page(page))
            side_by_side = _compare_html(page, f"../{name}", "../index.html")
            if side_by_side is not None:
                await asyncio.to_thread(_write, directory / compare, side_by_side)
            summary = run_summary(run_id, page.log, page.damage)
            entries.append(
                RunEntry(
                    run_id,
                    summary["status"],
                    summary["stop_reason"],
                    None if page.log == RunLog() else len(page.log.steps),
                    run_tokens(page.log),
                    summary["model"],
                    name,
                    run_status=summary["run_status"],
                    wall_ms=None
                    if page.log == RunLog()
                    else sum(completed.step.step_wall_ms for completed in page.log.steps),
                    task=_task_line(page),
                    started_at=summary["started_at"],
                )
            )
    unreadable = list(listing.unreadable)
    await asyncio.to_thread(
        _write, directory / "index.html", index_page(str(url), entries, unreadable)
    )
    return len(entries), damaged, unreadable


@click.command()
@click.argument("run_id", required=False)
@click.option(
    "--all", "every", is_flag=True, help="Every run: a list page linking to one page per run."
)
@output_option(
    "The page to write (default ./RUN_ID.html; a run id with other characters than letters, "
    "digits, '.', '-' and '_' gets its safe characters and a digest); with --all, a directory "
    "(default ./polyloop-view) that gets index.html and runs/.",
    file=False,
)
@store_option_saying(STORE_AS_FOR_RUNS)
@click.option(
    "--agent",
    "agent",
    metavar="MODULE:FACTORY",
    default=None,
    help="The callable that builds the run's agent, factory(episode, store), as for `polyloop "
    "batch`: the page then shows the goal and the messages sent to the model, rebuilt from "
    "its request as resume rebuilds them (the log does not record them). Nothing is run.",
)
@click.option(
    "--episode",
    "episode_json",
    metavar="JSON",
    default=None,
    help="With --agent: the episode's data as the factory reads it, a JSON object (its run_id "
    "is set to the run's). Default: {}.",
)
@json_option_saying("Print a JSON summary instead of a line.")
def view(
    run_id: str | None,
    every: bool,
    output_path: Path | None,
    store: str | None,
    agent: str | None,
    episode_json: str | None,
    as_json: bool,
) -> None:
    """Write a run's trajectory as one HTML page that opens from disk (no network): every
    step's reply, decision, action, observation and intents, the step it started and did not
    finish, the stop reason and why, the parameter snapshot; keyboard navigation (j/k).
    A fork's page shows its lineage and the inherited steps, and a second page (PAGE with
    .compare before its suffix) sets it beside its source step by step from the fork step.
    --all: every run of the store, listed. --agent: the task and messages too.
    """
    if (run_id is None) == (not every):
        raise click.UsageError("give either a RUN_ID or --all (not both, not neither).")
    if episode_json is not None and agent is None:
        raise click.UsageError("--episode goes with --agent (the factory reads it).")
    built: Agent | None = None if agent is None else (agent, episode_json)
    choice = store_choice(store)
    url, advice = choice.url, choice.missing_advice
    option = () if store is None else ("--store", str(url))
    output = Output(as_json=as_json)
    if run_id is None:
        directory = output_path or Path("polyloop-view")
        if directory.exists() and not directory.is_dir():
            raise CliError(
                ExitCode.USAGE,
                f"{directory} is a file; with --all, -o names a directory for the pages.",
            )
        count, damaged, unreadable = asyncio.run(_write_all(url, directory, advice, built))
        index = directory / "index.html"
        if as_json:
            output.json({"store": str(url), "runs": count, "output": str(index)})
        else:
            output.line(f"wrote the pages of {count} runs; open {index}")
        if damaged or unreadable:
            raise CliError(
                ExitCode.CORRUPT_LOG,
                f"{len(damaged)} run(s) and {len(unreadable)} run file(s) could not be read "
                f"whole; their pages show what could; `{suggest('verify', '--all', *option)}` "
                "names the bad records.",
            )
        return
    path = output_path or default_page(run_id)
    compare = compare_path(path)
    page = asyncio.run(_read(url, run_id, advice, built, compare))
    if page.damage is None and page.log == RunLog():
        raise CliError(
            ExitCode.RUN_NOT_FOUND,
            f"no run {shown_id(run_id)} in the {url.kind} store at {url.location}; list the "
            f"runs with `{suggest('runs', *option)}`.",
        )
    _write(path, run_page(page))
    side_by_side = _compare_html(page, path.name)
    if side_by_side is not None:
        _write(compare, side_by_side)
    if as_json:
        document = {
            "store": str(url),
            "run_id": run_id,
            "steps": len(page.log.steps),
            "output": str(path),
        }
        if side_by_side is not None:
            document["compare"] = str(compare)
        output.json(document)
    else:
        beside = (
            ""
            if side_by_side is None
            else f", and {compare} (beside its source from the fork step)"
        )
        output.line(f"wrote {path} ({len(page.log.steps)} steps){beside}; open it in a browser.")
    if page.damage is not None:
        raise CliError(
            ExitCode.CORRUPT_LOG,
            damaged_message(
                run_id, url, f"the page shows the {len(page.log.steps)} step(s) that could be read."
            ),
            detail=page.damage,
        )
