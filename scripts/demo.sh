#!/usr/bin/env bash
# The main job: the crash-and-resume demo on the embedded default store (SQLite).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet --disable-pip-version-check uv
uv sync --all-packages --frozen --quiet
# Offline, in seconds: a worker is killed with SIGKILL mid-action and the run is resumed.
# The store and the side-effect ledger go to ${POLYLOOP_HOME:-./.polyloop}; pass --help for options.
uv run polyloop demo "$@"
