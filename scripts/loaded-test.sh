#!/usr/bin/env bash
# The whole suite while every core is kept busy by a CPU load generator, as on a shared CI
# machine: a test whose verdict depends on the machine being idle fails here.
#
#   scripts/loaded-test.sh [-- COMMAND...]
#
# COMMAND defaults to `bash scripts/test.sh` in this checkout (e.g. `-- bash
# scripts/fresh-clone-test.sh` for a fresh clone under load). The load is one busy process per
# core (stress-ng's cpu stressor when installed, else a Python busy loop), at the same priority
# as the tests, started before the command and stopped when this script exits however it ends;
# their process ids are in POLYLOOP_LOAD_PIDS. Prints the elapsed time and PASSED or FAILED
# last; exits with the command's status.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ "${1:-}" = -- ] && shift
command=("$@")
[ "${#command[@]}" -gt 0 ] || command=(bash scripts/test.sh)
say() { echo "loaded-test: $*"; }

cores="$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)"
pids=()
stop_load() {
    local pid
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
    pids=()
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# The busy process itself (no wrapper such as a pyenv shim), so that its process id stops it.
python=/usr/bin/python3
[ -x "$python" ] || python="$(command -v python3)"
for _ in $(seq 1 "$cores"); do
    if command -v stress-ng >/dev/null 2>&1; then
        stress-ng --quiet --cpu 1 --timeout 0 &
    else
        "$python" -c 'while True: pass' &
    fi
    pids+=("$!")
done
export POLYLOOP_LOAD_PIDS="${pids[*]}"
say "$cores busy process(es) (${pids[*]}) beside: ${command[*]}"
started="$(date +%s)"
"${command[@]}"
status=$?
elapsed=$(($(date +%s) - started))
stop_load
verdict=PASSED
[ "$status" = 0 ] || verdict="FAILED (exit $status)"
say "$verdict under load in $((elapsed / 60)) min $((elapsed % 60)) s ($elapsed s)"
exit "$status"
