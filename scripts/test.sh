#!/usr/bin/env bash
# The whole test suite and every quality gate: what CI runs and what the README names.
set -euo pipefail
cd "$(dirname "$0")/.."
# What the tests need beyond Python (sandbox backends, PostgreSQL's binaries): installed here when
# this user may (root, passwordless sudo), else one line per missing part with the command that
# provides it, and nothing else is run.
bash scripts/preflight.sh || { echo "test.sh: stopped before any test ran" >&2; exit 1; }
source scripts/bootstrap-uv.sh
# The tools below (contract-suite/run.sh, the wheel-building tests) find the same uv on PATH.
PATH="$(dirname "$UV"):$PATH"
export PATH
"$UV" sync --all-packages --frozen
# PostgreSQL for the postgres store's tests: a throwaway cluster unless the caller names a server.
# A cluster that does not start stops the run here, with the cluster script's own message.
pg_dir="" phoenix_dir=""
model_dir=""
cleanup() {
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
# the background now, so that the minute overlaps the gates, and waited for before pytest.
if [ -z "${POLYLOOP_TEST_PHOENIX_URL:-}" ]; then
    phoenix_dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-phoenix.XXXXXX")"
    bash scripts/phoenix-test-server.sh start "$phoenix_dir" >/dev/null 2>"$phoenix_dir.log" &
    phoenix_start=$!
fi
# The real model (Gemma 3 270M on llama-cpp-python's server), likewise: seconds to start once
# its environment is built (cached; the first build on a machine takes minutes, design 0066).
if [ -z "${POLYLOOP_TEST_MODEL_URL:-}" ]; then
    model_dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-model.XXXXXX")"
    bash scripts/model-test-server.sh start "$model_dir" >/dev/null 2>"$model_dir.log" &
    model_start=$!
fi
echo "== ruff"; "$UV" run --frozen ruff format --check . && "$UV" run --frozen ruff check .
echo "== import-linter"; "$UV" run --frozen lint-imports
echo "== mypy --strict"; "$UV" run --frozen mypy
echo "== contract suite (our implementations through the installed plugin)"; bash contract-suite/run.sh -q
if [ -n "$phoenix_dir" ]; then
    wait "$phoenix_start" || {
        cat "$phoenix_dir.log" >&2
        echo "test.sh: the throwaway Phoenix server did not start (see above), so no test was run" >&2
        rm -f "$phoenix_dir.log"
        exit 1
    }
    rm -f "$phoenix_dir.log"
    export POLYLOOP_TEST_PHOENIX_URL="$(cat "$phoenix_dir/url")"
fi
if [ -n "$model_dir" ]; then
    wait "$model_start" || {
        cat "$model_dir.log" >&2
        echo "test.sh: the throwaway model server did not start (see above), so no test was run" >&2
        rm -f "$model_dir.log"
        exit 1
    }
    rm -f "$model_dir.log"
    export POLYLOOP_TEST_MODEL_URL="$(cat "$model_dir/url")"
fi
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
# No snapshot test runs alone: the parallel part judges unused snapshots; here syrupy would
# count the deselected snapshot tests' snapshots as unused, so it only warns.
echo "== pytest (alone)"; pytest_part -p no:xdist --test-group=serial --snapshot-warn-unused "$@"
exit "$status"
