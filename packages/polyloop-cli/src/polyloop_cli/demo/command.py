"""``polyloop demo``: an agent run killed with SIGKILL half-way, then resumed.

Two runs of the same small support task (look an order up, refund the undelivered item, close
the ticket) on a durable store, each in a worker process that is killed in the middle of an
action:

- run A is killed inside ``lookup_order`` (replay policy ``safe``): resume executes it again
  and the run completes;
- run B is killed inside ``issue_refund`` (replay policy ``never``) right after the money moved:
  resume does not repeat it and stops the run with ``resume_state_unknown``.

A ledger file outside the store counts every side effect, so the summary can show, from the
outside world's point of view, which actions ran once and which were replayed.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from polyloop.errors import PolyLoopError
from polyloop.ports import Event, EventKind
from polyloop.session import resume
from polyloop.types import StopReason
from polyloop_cli.demo.task import (
    TOOL_POLICIES,
    ModelConfig,
    build_agent,
    model_client,
    read_ledger,
)
from polyloop_cli.demo.worker import STORE_VARIABLE
from polyloop_cli.rendering.inspection import plan_report, step_row
from polyloop_cli.rendering.invocation import suggest
from polyloop_cli.rendering.render import Column, Fit, Output
from polyloop_cli.shared.command_kit import json_option_saying, store_option_saying
from polyloop_cli.shared.errors import CliError, ExitCode
from polyloop_cli.shared.stores import (
    StoreUrl,
    default_store_url,
    open_store,
    parse_store_url,
    polyloop_home,
    read_log,
)

__all__ = ["demo"]

#: How long the parent waits for the worker to reach its crash point.
WORKER_TIMEOUT_SECONDS = 120.0


@dataclass(slots=True)
class Scenario:
    label: str
    run_id: str
    kill_in: str
    title: str
    worker_pid: int | None = None
    killed: bool = False
    plan_after_kill: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    worker_outcome: str | None = None
    actions: list[dict[str, Any]] = field(default_factory=list)


def _model_config(base_url: str | None, model: str | None, scripted: bool) -> ModelConfig:
    if scripted:
        return ModelConfig()
    if (base_url is None) != (model is None):
        raise CliError(
            ExitCode.USAGE,
            "--base-url and --model go together: pass both (or set POLYLOOP_GATEWAY_URL and "
            "POLYLOOP_MODEL), or neither for the built-in scripted model.",
        )
    if base_url is not None:
        return ModelConfig(base_url, model)
    from polyloop.adapters.gateway import GATEWAY_URL_VARIABLE, MODEL_VARIABLE

    env_url = os.environ.get(GATEWAY_URL_VARIABLE)
    env_model = os.environ.get(MODEL_VARIABLE)
    if env_url and env_model:
        return ModelConfig(env_url, env_model)
    return ModelConfig()


@click.command()
@store_option_saying(
    "Where the runs go. Default: $POLYLOOP_STORE, else sqlite:$POLYLOOP_HOME/demo.sqlite "
    "(POLYLOOP_HOME defaults to ./.polyloop)."
)
@click.option(
    "--ledger",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The side-effect ledger file. Default: beside the store, named after it "
    "(the default store's is $POLYLOOP_HOME/demo-ledger.jsonl).",
)
@click.option(
    "--base-url",
    default=None,
    help="An OpenAI-compatible API root, e.g. "
    "http://127.0.0.1:8000/v1 (or set POLYLOOP_GATEWAY_URL). Needs --model.",
)
@click.option("--model", default=None, help="Model name for --base-url (or set POLYLOOP_MODEL).")
@click.option(
    "--scripted",
    is_flag=True,
    help="Use the built-in scripted model even when POLYLOOP_GATEWAY_URL/POLYLOOP_MODEL are set.",
)
@click.option(
    "--approval",
    is_flag=True,
    help="Instead: a run whose refund waits for a person's approval. It parks before the "
    "refund; the command printed (`polyloop approve … --agent …`) approves and continues it.",
)
@json_option_saying("Print one JSON document at the end.")
def demo(
    store: str | None,
    ledger: Path | None,
    base_url: str | None,
    model: str | None,
    scripted: bool,
    approval: bool,
    as_json: bool,
) -> None:
    """Kill an agent run with SIGKILL mid-action, resume it, and show that no side effect
    marked `never` ran twice. Offline by default; finishes in seconds. With --approval: a
    run that waits for a person before it refunds."""
    started = time.monotonic()
    output = Output(as_json=as_json)
    url = parse_store_url(store if store is not None else default_store_url())
    if url.path is not None:
        url = StoreUrl.of_file(url.kind, url.path.absolute())
    ledger_path = (ledger or default_ledger(url)).absolute()
    config = _model_config(base_url, model, scripted)
    if approval:
        _approval_demo(output, url, ledger_path, config, store)
        return
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(2)
    scenarios = [
        Scenario(
            "A",
            f"demo-{stamp}-a",
            "lookup_order",
            "killed inside lookup_order (replay policy safe)",
        ),
        Scenario(
            "B",
            f"demo-{stamp}-b",
            "issue_refund",
            "killed inside issue_refund (replay policy never)",
        ),
    ]
    asyncio.run(_probe_store(url))
    try:
        ledger_path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CliError(
            ExitCode.STORE_UNREADABLE,
            f"cannot create {ledger_path.parent} ({error.strerror}); pass --ledger or set "
            "POLYLOOP_HOME to a writable place.",
        ) from None
    _intro(output, url, ledger_path, config)
    for scenario in scenarios:
        asyncio.run(_play(output, scenario, url, ledger_path, config))
    elapsed = time.monotonic() - started
    at_most_once = all(
        action["executions"] <= 1
        for scenario in scenarios
        for action in scenario.actions
        if action["replay_policy"] == "never"
    )
    _summary(output, scenarios, elapsed, at_most_once, None if store is None else str(url))
    if as_json:
        output.json(
            {
                "store": str(url),
                "ledger": str(ledger_path),
                "model": {"kind": "scripted" if config.scripted else "gateway", **config.to_json()},
                "runs": [_scenario_json(scenario) for scenario in scenarios],
                "never_actions_ran_at_most_once": at_most_once,
                "seconds": round(elapsed, 3),
            }
        )
    if not at_most_once:
        raise CliError(
            ExitCode.DEMO_FAILED,
            "an action with replay policy never ran twice; this is a bug in PolyLoop, please "
            f"report it with the ledger {ledger_path}.",
        )
    not_staged = [scenario.label for scenario in scenarios if not scenario.killed]
    if not_staged:
        raise CliError(
            ExitCode.DEMO_FAILED,
            f"run(s) {', '.join(not_staged)} never reached the tool the demo kills in (the "
            "model chose other actions); rerun, or use the scripted model (--scripted).",
        )


def _approval_demo(
    output: Output, url: StoreUrl, ledger: Path, config: ModelConfig, store: str | None
) -> None:
    from polyloop_cli.demo.approval import play_approval

    asyncio.run(_probe_store(url))
    try:
        ledger.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise CliError(
            ExitCode.STORE_UNREADABLE,
            f"cannot create {ledger.parent} ({error.strerror}); pass --ledger or set "
            "POLYLOOP_HOME to a writable place.",
        ) from None
    option = () if store is None else ("--store", str(url))
    document = asyncio.run(play_approval(output, url, ledger, config, option))
    if output.as_json:
        output.json(document)


def default_ledger(url: StoreUrl) -> Path:
    """The ledger beside the store, named after it: ``demo.sqlite`` → ``demo-ledger.jsonl``,
    a JSON Lines directory ``runs/`` → ``runs-ledger.jsonl`` (never inside the directory,
    where it would pass for a run file). A store not in a file (a server) has its ledger in
    ``POLYLOOP_HOME``, named after its scheme: ``postgresql-ledger.jsonl``."""
    if url.path is None:
        return polyloop_home() / f"{url.kind}-ledger.jsonl"
    stem = url.path.stem if url.kind == "sqlite" else url.path.name
    return url.path.parent / f"{stem}-ledger.jsonl"


async def _probe_store(url: StoreUrl) -> None:
    """Fail here, with the store's own message, rather than inside the worker."""
    async with open_store(url, create=True) as store:
        await read_log(store, url, "polyloop-demo-probe")


def _scenario_json(scenario: Scenario) -> dict[str, Any]:
    return {
        "label": scenario.label,
        "run_id": scenario.run_id,
        "killed_in": scenario.kill_in,
        "killed_in_replay_policy": TOOL_POLICIES[scenario.kill_in].value,
        "killed": scenario.killed,
        "worker_pid": scenario.worker_pid,
        "plan_after_kill": scenario.plan_after_kill,
        "stop_reason": scenario.stop_reason,
        "actions": scenario.actions,
    }


def _intro(output: Output, url: StoreUrl, ledger: Path, config: ModelConfig) -> None:
    output.line("PolyLoop crash-and-resume demo", style="bold")
    if config.scripted:
        output.line(
            "Model: the built-in scripted model (no model configured; pass --base-url and "
            "--model, or set POLYLOOP_GATEWAY_URL and POLYLOOP_MODEL, to drive a real one)."
        )
    else:
        output.line(f"Model: {config.model} at {config.base_url} (OpenAI-compatible gateway).")
    output.line(f"Store: {url}    side-effect ledger: {ledger}")
    output.line(
        "Task: look up order A-1042, refund the undelivered item, close the ticket. Tools: "
        "lookup_order (safe), issue_refund (never), close_ticket (never, completes_run)."
    )


async def _play(
    output: Output, scenario: Scenario, url: StoreUrl, ledger: Path, config: ModelConfig
) -> None:
    output.line()
    output.line(f"Run {scenario.label} ({scenario.run_id}): {scenario.title}", style="bold cyan")
    await _crash(output, scenario, url, ledger, config)
    async with open_store(url) as store:
        log = await read_log(store, url, scenario.run_id)
        failures = [result.failure for result in log.model_results if result.failure]
        if not scenario.killed and failures:
            raise CliError(
                ExitCode.MODEL_ERROR,
                "the model endpoint failed; check --base-url, --model and POLYLOOP_API_KEY, or "
                "use the scripted model (--scripted).",
                detail=failures[-1][:500],
            )
        output.line(f"  After the kill the log holds {len(log.steps)} completed step(s).")
        if scenario.killed and log.finished is None:
            report = plan_report(log)
            scenario.plan_after_kill = report.to_json()
            output.line(
                Text.assemble(
                    "  polyloop plan: ",
                    (report.plan.state.value, "yellow"),
                    " → ",
                    (report.plan.move.value, "bold"),
                )
            )
            output.line(f"  {report.plan.reason}", style="dim")
        output.line(f"  Resuming in this process (pid {os.getpid()}):")
        client = model_client(config)
        try:
            definition, request = build_agent(
                run_id=scenario.run_id,
                store=store,
                ledger=ledger,
                model=client,
                on_event=lambda event: _print_event(output, event, "resume"),
            )
            try:
                result = await resume(definition, request)
            except PolyLoopError as error:
                raise CliError(
                    ExitCode.DEMO_FAILED,
                    f"resume of {scenario.run_id} failed, which the demo never expects; please "
                    f"report it with the store {url}.",
                    detail=str(error),
                ) from None
        finally:
            aclose = getattr(client, "aclose", None)
            if callable(aclose):
                await aclose()
        scenario.stop_reason = result.stop_reason.value
        style = "red" if result.stop_reason is StopReason.RESUME_STATE_UNKNOWN else "green"
        output.line(Text.assemble("  Run stopped: ", (result.stop_reason.value, f"bold {style}")))
        if result.stop_reason is StopReason.RESUME_STATE_UNKNOWN:
            output.line(
                f"  PolyLoop cannot know whether {scenario.kill_in} took effect, so it refused to "
                "risk doing it twice. An operator checks the outside system (here: the ledger "
                "shows the refund went out once) and continues in a new run.",
                style="dim",
            )
        final_log = await read_log(store, url, scenario.run_id)
    scenario.actions = _actions(scenario, final_log.steps, ledger)


async def _crash(
    output: Output, scenario: Scenario, url: StoreUrl, ledger: Path, config: ModelConfig
) -> None:
    """Start the worker, relay its progress, SIGKILL it at the crash point."""
    worker_config = {
        "run_id": scenario.run_id,
        "ledger": str(ledger),
        "pause_in": scenario.kill_in,
        "model": config.to_json(),
    }
    # The store URL may hold a password: the environment is private to the user, argv is not.
    env = {**os.environ, "PYTHONUNBUFFERED": "1", STORE_VARIABLE: url.url}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "polyloop_cli.demo.worker",
        json.dumps(worker_config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        # Never written to: it closes when this process dies, which tells a paused worker.
        stdin=asyncio.subprocess.PIPE,
        env=env,
    )
    scenario.worker_pid = process.pid
    output.line(f"  Worker process {process.pid} starts the run:")
    assert process.stdout is not None
    assert process.stderr is not None
    # Drained all along, so a chatty worker can never block on a full stderr pipe.
    stderr_task = asyncio.ensure_future(process.stderr.read())
    deadline = time.monotonic() + WORKER_TIMEOUT_SECONDS
    try:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CliError(
                    ExitCode.DEMO_FAILED,
                    f"the worker did not reach {scenario.kill_in} within "
                    f"{WORKER_TIMEOUT_SECONDS:.0f} s; is the model endpoint slow or down?",
                )
            try:
                raw = await asyncio.wait_for(process.stdout.readline(), remaining)
            except TimeoutError:
                continue
            if not raw:
                break
            try:
                message = json.loads(raw)
            except ValueError:
                continue
            kind = message.get("event")
            if kind == "paused":
                policy = TOOL_POLICIES[message["tool"]].value
                output.line(
                    Text.assemble(
                        f"    step in progress: {message['tool']} has made its side effect "
                        f"(ledger written) and not yet returned → ",
                        ("SIGKILL", "bold red"),
                        f" to pid {process.pid} (replay policy {policy})",
                    )
                )
                os.kill(process.pid, signal.SIGKILL)
                scenario.killed = True
                break
            if kind == "error":
                await process.wait()
                stderr = (await stderr_task).decode(errors="replace")
                code = ExitCode(message.get("code", int(ExitCode.DEMO_FAILED)))
                raise CliError(
                    code,
                    f"the demo's worker process failed ({message['kind']}); the detail says "
                    "why: fix that and rerun the demo.",
                    detail=message["message"]
                    + (f" ({stderr.strip().splitlines()[-1]})" if stderr.strip() else ""),
                )
            if kind == "worker_done":
                scenario.worker_outcome = message.get("stop_reason")
                output.line(
                    f"    the run ended ({scenario.worker_outcome}) without reaching "
                    f"{scenario.kill_in}: nothing to kill.",
                    style="yellow",
                )
                continue
            _print_wire_event(output, message, "worker")
    finally:
        if process.returncode is None and not scenario.killed:
            process.kill()
        await process.wait()
        if process.stdin is not None:
            process.stdin.close()
        await stderr_task
    if scenario.killed:
        output.line(
            f"  Worker exited with signal {-process.returncode if process.returncode else '?'} "
            "(SIGKILL): no cleanup, no RunFinished."
        )


def _print_wire_event(output: Output, message: dict[str, Any], who: str) -> None:
    if message.get("event") != "step_completed":
        return
    what = message.get("tool") or message.get("action") or "(no action)"
    observation = " ".join(str(message.get("observation") or "").split())
    if len(observation) > 70:
        observation = observation[:69] + "…"
    output.line(
        f"    [{who}] step {message['step']}: {what} → {message.get('status') or '-'}: "
        f"{observation}"
    )


def _print_event(output: Output, event: Event, who: str) -> None:
    if event.kind is EventKind.STEP_COMPLETED and event.step is not None:
        row = step_row(event.step, width=70)
        _print_wire_event(
            output,
            {
                "event": "step_completed",
                "step": row["step"],
                "tool": event.step.tool_name,
                "action": row["action"],
                "status": row["status"],
                "observation": row["observation"],
            },
            who,
        )


def _actions(scenario: Scenario, steps: Any, ledger: Path) -> list[dict[str, Any]]:
    entries = read_ledger(ledger, scenario.run_id)
    counts = Counter(entry["tool"] for entry in entries)
    by_tool_pids: dict[str, list[int]] = {}
    for entry in entries:
        by_tool_pids.setdefault(entry["tool"], []).append(int(entry["pid"]))
    actions = []
    for tool, policy in TOOL_POLICIES.items():
        count = counts.get(tool, 0)
        pids = by_tool_pids.get(tool, [])
        in_worker = sum(1 for pid in pids if pid == scenario.worker_pid)
        on_resume = count - in_worker
        if tool == scenario.kill_in and scenario.killed:
            if policy.value == "safe":
                fate = (
                    f"interrupted by SIGKILL, then replayed by resume under the same result_id "
                    f"(replay policy safe: repeating a read is harmless); executions: "
                    f"{in_worker} in the worker + {on_resume} on resume"
                )
            else:
                fate = (
                    "interrupted by SIGKILL after its side effect; resume did NOT repeat it "
                    "(replay policy never: it may or may not have happened) and stopped the run "
                    "with resume_state_unknown"
                )
        elif count == 0:
            fate = "not executed: the run stopped before it"
        elif count == 1:
            where = "before the kill" if in_worker else "after the resume"
            fate = f"ran once, {where}"
        else:
            fate = f"ran {count} times"
        actions.append(
            {"tool": tool, "replay_policy": policy.value, "executions": count, "fate": fate}
        )
    return actions


def _summary(
    output: Output,
    scenarios: list[Scenario],
    elapsed: float,
    at_most_once: bool,
    store_option: str | None,
) -> None:
    output.line()
    rows = []
    for scenario in scenarios:
        for action in scenario.actions:
            rows.append(
                (
                    scenario.label,
                    action["tool"],
                    action["replay_policy"],
                    action["executions"],
                    action["fate"],
                )
            )
    endings = ", ".join(f"run {scenario.label} {scenario.stop_reason}" for scenario in scenarios)
    output.line("Summary (executions counted in the side-effect ledger, outside the run log)")
    output.line(f"Stop reasons: {endings}.")
    output.table(
        (
            Column("RUN"),
            Column("ACTION"),
            Column("REPLAY"),
            Column("EXECUTIONS"),
            Column("WHAT HAPPENED AND WHY", Fit.FOLD),
        ),
        rows,
    )
    verdict = (
        "Every action marked never ran at most once across the kill and the resume."
        if at_most_once
        else "An action marked never ran twice!"
    )
    output.line(verdict, style="bold green" if at_most_once else "bold red")
    output.line(f"Finished in {elapsed:.1f} s.", style="dim")
    output.line()
    option = ("--store", store_option) if store_option else ()
    run_a, run_b = scenarios[0].run_id, scenarios[-1].run_id
    output.line("Inspect the runs (each line works when pasted here):")
    for words in (
        ("runs",),
        ("show", run_b),
        ("plan", run_b),
        ("export", run_a),
        ("view", run_b),
    ):
        output.command(suggest(*words, *option))
