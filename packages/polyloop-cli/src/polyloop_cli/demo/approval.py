"""``polyloop demo --approval``: the demo's refund waits for a person's approval.

The same support task as the crash demo, with ``issue_refund`` marked ``requires_approval``:
the run looks the order up, then parks right before the refund — its ask recorded, its lease
given back, no process waiting. The demo shows the pending ask and the one command that
approves it and continues the run (``polyloop approve … --agent`` :data:`AGENT`), which then
refunds once and closes the ticket. Offline with the scripted model; it takes about a second.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from polyloop.asking import RunParked
from polyloop.batch import Episode, EpisodeAgent, FactoryError
from polyloop.ports import RunLog, RunStore
from polyloop.session import run_or_park
from polyloop_cli.demo.task import (
    DEMO_BINDING,
    ModelConfig,
    build_agent,
    model_client,
    read_ledger,
)
from polyloop_cli.rendering.asks import (
    DIGEST_SHOWN,
    argument_lines,
    ask_headline,
    ask_json,
    decide_commands,
)
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Output
from polyloop_cli.shared.errors import CliError, ExitCode
from polyloop_cli.shared.stores import StoreUrl, open_store

__all__ = ["AGENT", "agent", "agent_words", "known_agent", "play_approval"]

#: The factory that builds the approval demo's agent (``--agent`` of approve and resume).
AGENT = "polyloop_cli.demo.approval:agent"


@contextlib.asynccontextmanager
async def agent(episode: Episode, store: RunStore) -> AsyncIterator[EpisodeAgent]:
    """The approval demo's agent for ``episode`` (data: ``ledger``, optionally ``base_url``
    and ``model`` of a gateway), as ``polyloop approve``/``resume --agent`` build it."""
    data = episode.data
    if not isinstance(data.get("ledger"), str):
        example = """--episode '{"ledger": "PATH"}'"""
        raise FactoryError(
            f"the approval demo's agent needs the side-effect ledger of run {episode.run_id}: "
            f"pass {example} (`{suggest('pending')}` prints the whole command)."
        )
    config = ModelConfig(data.get("base_url"), data.get("model"))
    client = model_client(config)
    try:
        definition, request = build_agent(
            run_id=episode.run_id,
            store=store,
            ledger=Path(str(data["ledger"])),
            model=client,
            approval=True,
        )
        yield EpisodeAgent(definition, request)
    finally:
        aclose = getattr(client, "aclose", None)
        if callable(aclose):
            await aclose()


def agent_words(snapshot: Mapping[str, str], url: StoreUrl) -> tuple[str, ...] | None:
    """``--agent``/``--episode`` that continue a run of ``polyloop demo --approval`` on the
    store at ``url``, when ``snapshot`` (the run's parameter snapshot) is one of its runs: the
    demo's task with ``issue_refund`` gated. The ledger is the one the demo uses by default,
    beside the store; the gateway, if any, the snapshot's. ``None`` for any other run."""
    if snapshot.get("request.model_binding.demo") != DEMO_BINDING or (
        snapshot.get("request.tools.issue_refund.requires_approval") != "true"
    ):
        return None
    from polyloop_cli.demo.command import default_ledger

    if url.path is not None:
        url = StoreUrl.of_file(url.kind, url.path.absolute())
    data: dict[str, Any] = {"ledger": str(default_ledger(url).absolute())}
    if snapshot.get("model_client.kind") != "scripted":
        data.update(
            ModelConfig(
                snapshot.get("model_client.base_url"), snapshot.get("model_client.model")
            ).to_json()
        )
    return ("--agent", AGENT, "--episode", json.dumps(data))


def known_agent(log: RunLog, url: StoreUrl) -> tuple[str, ...] | None:
    """The ``--agent``/``--episode`` words that continue run ``log``, when the CLI knows its
    agent (a run of ``polyloop demo --approval``, told by its snapshot); else ``None``."""
    if log.started is None:
        return None
    return agent_words(log.started.parameter_snapshot, url)


async def play_approval(
    output: Output, url: StoreUrl, ledger: Path, config: ModelConfig, option: tuple[str, ...]
) -> dict[str, Any]:
    """Start the gated run until it parks; show what waits and how to approve it."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)
    run_id = f"demo-{stamp}-approval"
    data: dict[str, Any] = {"ledger": str(ledger)}
    if not config.scripted:
        data.update(config.to_json())
    output.line("PolyLoop approval demo", style="bold")
    output.line(
        "Task: look up order A-1042, refund the undelivered item, close the ticket. "
        "issue_refund requires a person's approval."
    )
    output.line(f"Store: {url}    side-effect ledger: {ledger}")
    episode = Episode(run_id, {"run_id": run_id, **data})
    async with open_store(url, create=True) as store, agent(episode, store) as built:
        outcome = await run_or_park(built.definition, built.request)
    if not isinstance(outcome, RunParked):
        raise CliError(
            ExitCode.DEMO_FAILED,
            f"run {run_id} stopped ({outcome.stop_reason.value}) without asking to refund (the "
            "model chose other actions); rerun, or use the scripted model (--scripted).",
        )
    ask = outcome.ask
    refunds = sum(1 for entry in read_ledger(ledger, run_id) if entry["tool"] == "issue_refund")
    approve, reject, _ = decide_commands(
        ask, option, ("--agent", AGENT, "--episode", json.dumps(data))
    )
    output.line()
    output.line(
        f"Run {run_id} parked after {outcome.steps_done} step(s): {ask_headline(ask)}, asked "
        f"{ask.asked_at}. No process waits for the answer; refunds so far: {refunds}.",
        style="bold magenta",
    )
    output.line(f"  arguments (sha256 {ask.arguments_sha256[:DIGEST_SHOWN]}):")
    for line in argument_lines(ask, margin="    "):
        output.line(line)
    output.line()
    output.line("Approve it and let the run go on (the refund runs once, then the ticket closes):")
    output.command(approve)
    output.line("or refuse it (the model reads the reason and goes on without the refund):")
    output.command(reject, style="dim")
    output.line("and see what waits for a person with:")
    output.command(suggest("pending", *option), style="dim")
    return {
        "store": str(url),
        "ledger": str(ledger),
        "run_id": run_id,
        "run_status": "waiting_approval",
        "steps": outcome.steps_done,
        "pending_ask": ask_json(ask),
        "refunds_so_far": refunds,
        "agent": AGENT,
        "episode": data,
        "approve_command": approve,
    }
