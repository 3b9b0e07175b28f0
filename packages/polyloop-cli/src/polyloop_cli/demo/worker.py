"""The demo's worker process: starts one run and reports progress as JSON lines on stdout.

``python -m polyloop_cli.demo.worker CONFIG`` where CONFIG is a JSON object with ``run_id``,
``ledger`` (path), ``pause_in`` (tool name or null) and ``model`` (``{"base_url", "model"}``;
nulls for the scripted model); the store URL comes in the environment variable
``POLYLOOP_DEMO_WORKER_STORE``, because it may hold a password and any user can read a
process's arguments. When the run reaches ``pause_in``,
the tool performs its side effect, the worker prints ``{"event": "paused", ...}`` and waits:
the parent kills it with SIGKILL there (if the parent dies instead, the worker's stdin
reaches end of file and it exits at once). Not a public interface.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from polyloop.session import run
from polyloop_cli.demo.task import ModelConfig, build_agent, emit_line, event_json, model_client
from polyloop_cli.shared.errors import CliError, ExitCode
from polyloop_cli.shared.stores import open_store, parse_store_url

#: Exit status of a worker whose parent died while it waited at the crash point.
EXIT_ORPHANED = 70
#: The environment variable holding the store URL.
STORE_VARIABLE = "POLYLOOP_DEMO_WORKER_STORE"


async def _work(config: dict[str, Any]) -> None:
    pause_in = config.get("pause_in")
    model_config = ModelConfig(**config["model"])

    async def pause(tool: str) -> None:
        if tool == pause_in:
            emit_line({"event": "paused", "tool": tool, "pid": os.getpid()})
            # Wait for the SIGKILL. Should the parent die first, its end of our stdin closes:
            # leave at once, without finishing the action or the run (as a crash would).
            await asyncio.to_thread(sys.stdin.buffer.read)
            os._exit(EXIT_ORPHANED)

    url = parse_store_url(os.environ[STORE_VARIABLE])
    async with open_store(url, create=True) as store:
        model = model_client(model_config)
        try:
            definition, request = build_agent(
                run_id=config["run_id"],
                store=store,
                ledger=Path(config["ledger"]),
                model=model,
                on_event=lambda event: emit_line(event_json(event)),
                pause=pause,
            )
            result = await run(definition, request)
        finally:
            aclose = getattr(model, "aclose", None)
            if callable(aclose):
                await aclose()
    emit_line({"event": "worker_done", "stop_reason": result.stop_reason.value})


def main() -> None:
    config = json.loads(sys.argv[1])
    try:
        asyncio.run(_work(config))
    except Exception as error:
        emit_line(
            {
                "event": "error",
                "kind": type(error).__name__,
                "code": int(_exit_code(error)),
                "message": " ".join(str(error).split()),
            }
        )
        sys.exit(1)


def _exit_code(error: Exception) -> ExitCode:
    """The CLI's exit code for a failure inside the worker."""
    from polyloop.adapters.gateway import GatewayError
    from polyloop.errors import StoreError

    if isinstance(error, CliError):
        return error.code
    if isinstance(error, GatewayError):
        return ExitCode.MODEL_ERROR
    if isinstance(error, StoreError | OSError):
        return ExitCode.STORE_UNREADABLE
    return ExitCode.DEMO_FAILED


if __name__ == "__main__":
    main()
