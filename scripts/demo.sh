#!/usr/bin/env bash
# The main job: the crash-and-resume demo on the embedded default store (SQLite).
# Run it from anywhere: the store and the side-effect ledger go to ${POLYLOOP_HOME:-./.polyloop}
# under the directory you are in, and the commands the demo prints work when pasted there.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/bootstrap-uv.sh"
"$UV" sync --project "$root" --all-packages --frozen --quiet
# Offline, in seconds: a worker is killed with SIGKILL mid-action and the run is resumed.
# Pass --help for options.
exec "$UV" run --project "$root" --frozen --no-sync polyloop demo "$@"
