"""A store written the way a third party would write one, outside PolyLoop's packages.

``textlog:///abs/dir`` keeps each run as one file of JSON lines in ``dir`` and the run_ids, in
first-write order, in ``dir/index``. It implements RunStore, RunListing and StoreClosing and
nothing else (no leases, no duplicate refusal, no fsync): enough to be inspected by the
``polyloop`` command once its distribution registers :func:`open_url` under the entry-point
group ``polyloop.stores``. The CLI tests install it into a directory on ``PYTHONPATH``, with a
``.dist-info`` beside it, as a wheel would.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from polyloop.errors import ConfigurationError
from polyloop.ports import RunLog
from polyloop.serialization import LogRecord, dumps_log_record, loads_log_record
from polyloop.types import Intent, ModelCallResult, RunFinished, RunStarted, StepCompleted

SCHEME = "textlog"


def open_url(url: str) -> TextLogStore:
    """The factory the entry point names: ``textlog:///abs/dir``."""
    prefix = f"{SCHEME}://"
    if not url.startswith(prefix) or not url[len(prefix) :].startswith("/"):
        raise ConfigurationError(f"a textlog URL is textlog:///absolute/dir, not {url!r}.")
    return TextLogStore(Path(url[len(prefix) :]))


class TextLogStore:
    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self.closed = False

    def _file(self, run_id: str) -> Path:
        return self._directory / hashlib.sha256(run_id.encode()).hexdigest()

    async def _append(self, record: LogRecord) -> None:
        # Blocking file I/O on the event loop: a toy store, not a model to copy.
        self._directory.mkdir(parents=True, exist_ok=True)
        path = self._file(record.run_id)
        if not path.exists():
            _append_line(self._directory / "index", json.dumps(record.run_id))
        _append_line(path, dumps_log_record(record))

    async def write_run_started(self, record: RunStarted) -> None:
        await self._append(record)

    async def write_intent(self, record: Intent) -> None:
        await self._append(record)

    async def write_model_call_result(self, record: ModelCallResult) -> None:
        await self._append(record)

    async def write_step_completed(self, record: StepCompleted) -> None:
        await self._append(record)

    async def write_run_finished(self, record: RunFinished) -> None:
        await self._append(record)

    async def read_log(self, run_id: str) -> RunLog:
        path = self._file(run_id)
        if not path.exists():
            return RunLog()
        records = [loads_log_record(line) for line in path.read_text("utf-8").splitlines()]
        return RunLog(
            started=next((r for r in records if isinstance(r, RunStarted)), None),
            intents=tuple(r for r in records if isinstance(r, Intent)),
            model_results=tuple(r for r in records if isinstance(r, ModelCallResult)),
            steps=tuple(r for r in records if isinstance(r, StepCompleted)),
            finished=next((r for r in records if isinstance(r, RunFinished)), None),
        )

    async def list_run_ids(self) -> tuple[str, ...]:
        index = self._directory / "index"
        if not index.exists():
            return ()
        return tuple(json.loads(line) for line in index.read_text("utf-8").splitlines())

    def parameters(self) -> Mapping[str, str]:
        return {"kind": SCHEME, "directory": str(self._directory)}

    def close(self) -> None:
        self.closed = True

    async def aclose(self) -> None:
        self.close()


def _append_line(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def open_url_without_listing(url: str) -> UnlistedStore:
    """A second factory: the same store behind the bare RunStore protocol (no listing)."""
    return UnlistedStore(open_url(url.replace("textlog-unlisted://", "textlog://", 1)))


class UnlistedStore:
    """Only the six RunStore calls and ``parameters()``: what the seed's protocol promises."""

    def __init__(self, inner: TextLogStore) -> None:
        self._inner = inner
        self.write_run_started = inner.write_run_started
        self.write_intent = inner.write_intent
        self.write_model_call_result = inner.write_model_call_result
        self.write_step_completed = inner.write_step_completed
        self.write_run_finished = inner.write_run_finished
        self.read_log = inner.read_log
        self.parameters = inner.parameters
