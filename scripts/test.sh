#!/usr/bin/env bash
# The whole test suite and every quality gate: what CI runs and what the README names.
set -euo pipefail
cd "$(dirname "$0")/.."
# Bytecode is written and reused (design record 0063): with PYTHONDONTWRITEBYTECODE=1 inherited
# from the caller's environment, each of the suite's Python processes (xdist workers, CLI runs,
# children, SIGKILLed workers, the contract kit's inner pytest runs) would compile everything it
# imports from source again.
unset PYTHONDONTWRITEBYTECODE
# Each part's wall time, for CI's log (design record 0063 compares them).
part_started=0
took() {
    echo "test.sh: $1 took $((SECONDS - part_started)) s (the run so far: $SECONDS s)"
    part_started="$SECONDS"
}
# What the tests need beyond Python (sandbox backends, PostgreSQL's binaries, chromium): installed
# here when this user may (root, passwordless sudo), else one line per missing part with the
# command that provides it, and nothing else is run. Each part is tried, not only found.
bash scripts/preflight.sh || { echo "test.sh: stopped before any test ran" >&2; exit 1; }
# The tests run system tools too (runuser, dockerd): found whatever PATH the caller had (`env -i`).
source scripts/sbin-path.sh
source scripts/bootstrap-uv.sh
# The tools below (the wheel-building tests, the contract kit's runs) find the same uv on PATH.
PATH="$(dirname "$UV"):$PATH"
export PATH
"$UV" sync --all-packages --frozen
# mypy's cache outlives the clone (CI clones afresh each time); an entry is used only for a file
# whose contents it was made from.
export MYPY_CACHE_DIR="${MYPY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/polyloop/mypy}"
# PostgreSQL for the postgres store's tests: a throwaway cluster unless the caller names a server.
# A cluster that does not start stops the run here, with the cluster script's own message.
pg_dir="" phoenix_dir="" model_dir="" gates_dir=""
cleanup() {
    [ -z "$gates_dir" ] || rm -rf "$gates_dir"
    [ -z "$model_dir" ] || bash scripts/model-test-server.sh stop "$model_dir"
    [ -z "$phoenix_dir" ] || bash scripts/phoenix-test-server.sh stop "$phoenix_dir"
    [ -z "$pg_dir" ] || bash scripts/postgres-test-cluster.sh stop "$pg_dir"
}
trap cleanup EXIT
if [ -z "${POLYLOOP_TEST_POSTGRES_URL:-}" ]; then
    pg_dir="$(bash scripts/postgres-test-cluster.sh start)" || {
        echo "test.sh: the throwaway PostgreSQL cluster did not start (see above), so no test was run" >&2
        exit 1
    }
    export POLYLOOP_TEST_POSTGRES_URL="$(cat "$pg_dir/url")"
fi
# Phoenix, the OpenTelemetry sink's real receiver, takes a minute or more to start: started in
# the background now, so that the minute overlaps the gates and the parallel part, and waited
# for before the alone part, where its only tests are (tests/adapters/otel/test_phoenix.py).
if [ -z "${POLYLOOP_TEST_PHOENIX_URL:-}" ]; then
    phoenix_dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-phoenix.XXXXXX")"
    bash scripts/phoenix-test-server.sh start "$phoenix_dir" >/dev/null 2>"$phoenix_dir.log" &
    phoenix_start=$!
fi
# The real model (Gemma 3 270M on llama-cpp-python's server), likewise: seconds to start once
# its environment is built (cached; the first build on a machine takes minutes, design 0066).
# Its tests (tests/adapters/gateway/test_real_model.py, tests/batch/test_real_model.py) are in
# the alone part too.
if [ -z "${POLYLOOP_TEST_MODEL_URL:-}" ]; then
    model_dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-model.XXXXXX")"
    bash scripts/model-test-server.sh start "$model_dir" >/dev/null 2>"$model_dir.log" &
    model_start=$!
fi
wait_for_model() {
    [ -n "$model_dir" ] || return 0
    wait "$model_start" || {
        cat "$model_dir.log" >&2
        echo "test.sh: the throwaway model server did not start (see above), so no test was run" >&2
        rm -f "$model_dir.log"
        exit 1
    }
    rm -f "$model_dir.log"
    export POLYLOOP_TEST_MODEL_URL="$(cat "$model_dir/url")"
}
wait_for_phoenix() {
    [ -n "$phoenix_dir" ] || return 0
    wait "$phoenix_start" || {
        cat "$phoenix_dir.log" >&2
        echo "test.sh: the throwaway Phoenix server did not start (see above), so no test was run" >&2
        rm -f "$phoenix_dir.log"
        exit 1
    }
    grep -h "server on" "$phoenix_dir.log" || true
    rm -f "$phoenix_dir.log"
    export POLYLOOP_TEST_PHOENIX_URL="$(cat "$phoenix_dir/url")"
}
took "the preflight, the sync and the PostgreSQL cluster"
# The gates are single-threaded processes: they run side by side, each one's output printed whole
# in this order; one that fails stops the run before pytest, as before. The contract suite
# (contract-suite/ through the installed plugin, as a downstream project runs it) is run once, by
# pytest: tests/contract/test_real_stores.py runs exactly that and asserts more than its exit
# status (design record 0063).
gates_dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-gates.XXXXXX")"
gate_pids=()
gate() {
    local name="$1"
    shift
    # `|| rc=$?`: under `set -e` a failing gate would end its subshell before writing its status.
    { local rc=0; "$@" >"$gates_dir/$name" 2>&1 || rc=$?; echo "$rc" >"$gates_dir/$name.rc"; } &
    gate_pids+=("$!")
}
gate ruff bash -c '"$UV" run --frozen ruff format --check . && "$UV" run --frozen ruff check .'
gate import-linter "$UV" run --frozen lint-imports
gate "mypy --strict" "$UV" run --frozen mypy
for name in ruff import-linter "mypy --strict"; do
    until [ -f "$gates_dir/$name.rc" ]; do sleep 0.2; done
    echo "== $name"
    cat "$gates_dir/$name"
    [ "$(cat "$gates_dir/$name.rc")" = 0 ] || { wait "${gate_pids[@]}"; exit 1; }
done
took "the gates"
# pytest in two parts (design record 0042): every test that may share the machine, on every core;
# then, alone in one process, those whose verdict depends on time or racing processes
# (tests/serial_group.py). Arguments go to both; a selection holding no test of one part is
# fine. Both parts run; the exit status is the first failing part's.
status=0
pytest_part() {
    local rc=0
    "$UV" run --frozen pytest "$@" || rc=$?
    if [ "$rc" = 5 ] && [ "$selection" = yes ]; then rc=0; fi
    if [ "$status" = 0 ]; then status="$rc"; fi
}
selection=no; [ "$#" -gt 0 ] && selection=yes
echo "== pytest (in parallel)"; pytest_part -n auto --dist loadfile --test-group=parallel "$@"
took "pytest in parallel"
wait_for_phoenix
wait_for_model
took "the rest of Phoenix's and the model server's start"
# No snapshot test runs alone: the parallel part judges unused snapshots; here syrupy would
# count the deselected snapshot tests' snapshots as unused, so it only warns.
echo "== pytest (alone)"; pytest_part -p no:xdist --test-group=serial --snapshot-warn-unused "$@"
took "pytest alone"
exit "$status"
