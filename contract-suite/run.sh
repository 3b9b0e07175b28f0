#!/usr/bin/env bash
# Run PolyLoop's own implementations through the installed polyloop-contract plugin, exactly as
# a downstream project would: `pytest --polyloop-contract` over a directory holding a conftest.
# The plugin is found through its pytest11 entry point (no -p needed). Extra args go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
exec uv run pytest contract-suite --polyloop-contract -p no:cacheprovider -ra "$@"
