#!/usr/bin/env bash
# The main job: the crash-and-resume demo on the embedded default store (SQLite).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet --disable-pip-version-check uv
uv sync --all-packages --frozen --quiet
echo "The demo lands with the CLI issue; for now this checks the install:"
uv run python -c "import polyloop; print('polyloop modules:', polyloop.__all__)"
