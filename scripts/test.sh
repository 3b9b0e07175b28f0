#!/usr/bin/env bash
# The whole test suite and every quality gate: what CI runs and what the README names.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet --disable-pip-version-check uv
uv sync --all-packages --frozen
# PostgreSQL for the postgres store's tests: a throwaway cluster unless the caller names a server.
if [ -z "${POLYLOOP_TEST_POSTGRES_URL:-}" ] && pg_dir="$(bash scripts/postgres-test-cluster.sh start)"; then
    trap 'bash scripts/postgres-test-cluster.sh stop "$pg_dir"' EXIT
    export POLYLOOP_TEST_POSTGRES_URL="$(cat "$pg_dir/url")"
fi
echo "== ruff"; uv run ruff format --check . && uv run ruff check .
echo "== import-linter"; uv run lint-imports
echo "== mypy --strict"; uv run mypy
echo "== contract suite (our implementations through the installed plugin)"; bash contract-suite/run.sh -q
echo "== pytest"; uv run pytest "$@"
