"""`polyloop demo`: a worker killed with SIGKILL mid-action, then resumed.

The side effects are counted in the demo's ledger file, read here independently of the demo's
own summary: the `never` action must have run exactly once across the kill and the resume.
"""

from __future__ import annotations

import http.server
import json
import socket
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from polyloop_cli.demo.task import SCRIPT
from tests.cli._kit import ANSI_ESCAPE, assert_one_line_error, polyloop

#: Each test runs the demo end to end: a worker process killed with SIGKILL, then resumed.
pytestmark = [pytest.mark.slow, pytest.mark.crash]


def ledger_counts(ledger: Path, run_id: str) -> Counter[str]:
    entries = [json.loads(line) for line in ledger.read_text().splitlines() if line.strip()]
    return Counter(entry["tool"] for entry in entries if entry["run_id"] == run_id)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, str]]:
    from tests.cli._kit import clean_env

    home = tmp_path_factory.mktemp("demo") / "home"
    env = clean_env(home)
    result = polyloop("demo", "--json", env=env, timeout=60)
    assert result.code == 0, result.stderr
    return result.json(), env


def test_the_never_action_ran_exactly_once_across_kill_and_resume(
    demo: tuple[dict[str, Any], dict[str, str]],
) -> None:
    """The demo's run killed inside the never-action stops as resume_state_unknown without refunding
    twice, and the run killed inside the safe action replays it and completes, as the ledger counts.
    """
    document, env = demo
    run_a, run_b = document["runs"]
    ledger = Path(document["ledger"])
    assert ledger == Path(env["POLYLOOP_HOME"]).absolute() / "demo-ledger.jsonl"

    # Run B was killed inside issue_refund (never): the refund happened once, was not repeated.
    assert run_b["killed"] is True
    assert run_b["killed_in"] == "issue_refund"
    assert run_b["killed_in_replay_policy"] == "never"
    assert run_b["stop_reason"] == "resume_state_unknown"
    assert ledger_counts(ledger, run_b["run_id"]) == {"lookup_order": 1, "issue_refund": 1}
    assert run_b["plan_after_kill"]["state"] == "action_in_doubt"
    assert run_b["plan_after_kill"]["move"] == "stop_state_unknown"

    # Run A was killed inside lookup_order (safe): replayed, then the run completed.
    assert run_a["killed"] is True
    assert run_a["stop_reason"] == "task_completed"
    assert ledger_counts(ledger, run_a["run_id"]) == {
        "lookup_order": 2,
        "issue_refund": 1,
        "close_ticket": 1,
    }
    assert run_a["plan_after_kill"]["move"] == "execute_action_again"

    assert document["never_actions_ran_at_most_once"] is True
    assert document["model"]["kind"] == "scripted"
    assert document["seconds"] < 20


def test_the_store_tells_the_same_story(demo: tuple[dict[str, Any], dict[str, str]]) -> None:
    """After the demo, runs, show, export and verify --all read the same story from the default
    store without --store."""
    document, env = demo
    run_a, run_b = document["runs"]
    # The default store is the demo's: no --store needed afterwards.
    listed = polyloop("runs", "--json", env=env)
    assert listed.code == 0, listed.stderr
    rows = {row["run_id"]: row for row in listed.json()["runs"]}
    assert rows[run_a["run_id"]]["stop_reason"] == "task_completed"
    assert rows[run_b["run_id"]]["stop_reason"] == "resume_state_unknown"
    assert rows[run_b["run_id"]]["steps"] == 1

    shown = polyloop("show", run_b["run_id"], "--json", env=env)
    assert shown.code == 0, shown.stderr
    assert any("'action-1' (replay policy never)" in item for item in shown.json()["pending"])

    exported = polyloop("export", run_a["run_id"], env=env)
    tools = [json.loads(line)["tool_name"] for line in exported.stdout.splitlines()]
    assert tools == ["lookup_order", "issue_refund", "close_ticket"]

    verified = polyloop("verify", "--all", env=env)
    assert verified.code == 0, verified.stderr


def test_demo_text_output_explains_and_is_plain_when_piped(tmp_path: Path) -> None:
    """The demo's piped text explains each kill and resume without colour codes, and its ledger lies
    beside a JSON Lines store, not inside it."""
    from tests.cli._kit import clean_env

    env = clean_env(tmp_path / "home")
    store = tmp_path / "jsonl-runs"
    result = polyloop("demo", "--store", f"jsonl://{store}", env=env, timeout=60)
    assert result.code == 0, result.stderr
    out = result.stdout
    assert ANSI_ESCAPE not in out
    assert "built-in scripted model" in out
    assert "SIGKILL" in out
    assert "replayed by resume" in out
    assert "did NOT repeat it" in out
    assert "Every action marked never ran at most once" in out
    assert any(store.glob("*.jsonl"))
    # The ledger goes beside the store, not into ./.polyloop nor into the store's directory.
    assert (tmp_path / "jsonl-runs-ledger.jsonl").is_file()
    assert not (tmp_path / "home").exists()
    assert [] == [path.name for path in store.iterdir() if "ledger" in path.name]


def test_every_command_the_demo_prints_works_when_pasted(tmp_path: Path) -> None:
    """Each "Inspect" line runs, as printed, in the user's shell where polyloop is not on PATH."""
    from tests.cli._kit import inspect_commands, pasted, users_shell

    env = users_shell(tmp_path / "home")
    sqlite = tmp_path / "elsewhere" / "runs.sqlite"
    result = polyloop("demo", "--store", f"sqlite://{sqlite}", env=env, cwd=tmp_path)
    assert 0 == result.code, result.stderr
    assert (tmp_path / "elsewhere" / "runs-ledger.jsonl").is_file()
    commands = inspect_commands(result.stdout)
    assert ["runs", "show", "plan", "export", "view"] == [line.split()[1] for line in commands]
    for line in commands:
        assert " | " not in line
        ran = pasted(line, env=env, cwd=tmp_path)
        assert (line, 0) == (line, ran.code), ran.stderr
    viewed = commands[-1].split()[2]
    assert (tmp_path / f"{viewed}.html").is_file()  # `view`'s default page, in the directory


def test_base_url_without_model_is_a_usage_error(tmp_path: Path) -> None:
    """demo --base-url without --model is a usage error naming --model."""
    from tests.cli._kit import clean_env

    env = clean_env(tmp_path / "home")
    result = polyloop("demo", "--base-url", "http://127.0.0.1:9/v1", env=env)
    assert_one_line_error(result, 2)
    assert "--model" in result.stderr


class FakeChatCompletions(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that plays the demo script: the reply is chosen by how
    many assistant messages the prompt already holds, so a resumed run gets the same one."""

    calls: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(self.path)
        index = sum(1 for message in body["messages"] if message["role"] == "assistant")
        payload = {
            "id": f"fake-{len(self.calls)}",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": SCRIPT[index]},
                    "finish_reason": "stop",
                }
            ],
        }
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def endpoint() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeChatCompletions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_demo_drives_an_openai_compatible_endpoint(endpoint: str, tmp_path: Path) -> None:
    """With a gateway configured the demo drives a real OpenAI-compatible endpoint, and the recorded
    replies are not requested again on resume."""
    from tests.cli._kit import clean_env

    FakeChatCompletions.calls.clear()
    env = clean_env(tmp_path / "home", POLYLOOP_GATEWAY_URL=endpoint, POLYLOOP_MODEL="fake-model")
    result = polyloop("demo", "--json", env=env, timeout=60)
    assert result.code == 0, result.stderr
    document = result.json()
    assert document["model"] == {"kind": "gateway", "base_url": endpoint, "model": "fake-model"}
    run_a, run_b = document["runs"]
    assert run_b["stop_reason"] == "resume_state_unknown"
    assert ledger_counts(Path(document["ledger"]), run_b["run_id"])["issue_refund"] == 1
    assert run_a["stop_reason"] == "task_completed"
    # A: 3 calls (the first in the worker); B: 2 in the worker, none on resume.
    assert FakeChatCompletions.calls == ["/v1/chat/completions"] * 5
    text = polyloop("demo", "--scripted", env=env, timeout=60)
    assert "built-in scripted model" in text.stdout


def test_an_unreachable_endpoint_is_a_model_error(tmp_path: Path) -> None:
    """An endpoint nobody listens on is exit 8 naming --base-url."""
    from tests.cli._kit import clean_env

    env = clean_env(tmp_path / "home")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = polyloop(
        "demo", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m", env=env, timeout=60
    )
    assert_one_line_error(result, 8)
    assert "--base-url" in result.stderr


def test_a_paused_worker_whose_parent_died_exits_without_finishing(tmp_path: Path) -> None:
    """The worker waits for its SIGKILL at the crash point; should the demo die first, the
    worker must not wake up later and finish the run behind everybody's back."""
    from polyloop_cli.demo.worker import STORE_VARIABLE
    from tests.cli._kit import clean_env

    ledger = tmp_path / "ledger.jsonl"
    store = f"sqlite://{tmp_path / 'runs.sqlite'}"
    config = {
        "run_id": "orphan",
        "ledger": str(ledger),
        "pause_in": "issue_refund",
        "model": {"base_url": None, "model": None},
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "polyloop_cli.demo.worker", json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**clean_env(tmp_path / "home"), STORE_VARIABLE: store},
    )
    assert worker.stdin is not None
    assert worker.stdout is not None
    events = []
    for line in worker.stdout:
        events.append(json.loads(line)["event"])
        if events[-1] == "paused":
            break
    assert events[-1] == "paused"
    worker.stdin.close()  # what the parent's death looks like from the worker
    assert worker.wait(timeout=20) == 70
    worker.stdout.close()
    assert worker.stderr is not None
    worker.stderr.close()
    assert ledger_counts(ledger, "orphan") == {"lookup_order": 1, "issue_refund": 1}
    env = clean_env(tmp_path / "home")
    shown = polyloop("show", "orphan", "--store", store, "--json", env=env)
    assert shown.json()["status"] == "unfinished"
    assert shown.json()["steps"] != []
    assert len(shown.json()["steps"]) == 1


def test_demo_on_a_file_that_is_not_a_store(tmp_path: Path) -> None:
    """demo --store on a file that is not a store is exit 7 naming the file."""
    from tests.cli._kit import clean_env

    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database " * 200)
    result = polyloop("demo", "--store", f"sqlite://{junk}", env=clean_env(tmp_path / "home"))
    assert_one_line_error(result, 7)
    assert str(junk) in result.stderr
