#!/usr/bin/env bash
# A throwaway Arize Phoenix server: a real OTLP/HTTP receiver that stores spans and serves them
# back over its REST API, for the OpenTelemetry sink's tests. Phoenix is installed by the
# pinned uv into its own virtual environment under the cache directory (not the workspace: it
# is a test server, and its many dependencies stay out of uv.lock), then started on a free
# port of 127.0.0.1 with its data (SQLite) in a new temporary directory.
#
#   scripts/phoenix-test-server.sh install        install Phoenix into its environment if missing
#   scripts/phoenix-test-server.sh start [DIR]    new server with its data in DIR (default: a new
#                                                 temp dir); waits until it answers (it takes
#                                                 about a minute here); prints DIR; the base URL
#                                                 (OTLP endpoint and REST API) is in DIR/url
#   scripts/phoenix-test-server.sh stop DIR       stop the server and delete DIR
#
# The tests read the base URL from POLYLOOP_TEST_PHOENIX_URL when it is set, and otherwise
# start a server with this script once per test session.
set -euo pipefail

VERSION=20.26.1
say() { echo "phoenix-test-server: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/polyloop"
venv="$cache/phoenix-$VERSION"

install() {
    [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import phoenix" 2>/dev/null && return 0
    # shellcheck source=/dev/null
    source "$here/bootstrap-uv.sh"
    say "installing arize-phoenix==$VERSION into $venv"
    rm -rf "$venv"
    mkdir -p "$cache"
    { "$UV" venv -q --python 3.11 "$venv" &&
        VIRTUAL_ENV="$venv" "$UV" pip install -q "arize-phoenix==$VERSION"; } \
        >"$cache/phoenix-install.log" 2>&1 || {
        say "installing Phoenix failed:"; tail -n 20 "$cache/phoenix-install.log" >&2; return 1
    }
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ready() {
    python3 - "$1" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/healthz", timeout=2) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

start() {
    local dir="${1:-}" port grpc url pid waited
    install || exit 1
    if [ -z "$dir" ]; then
        dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-phoenix.XXXXXX")"
    else
        mkdir -p "$dir"
    fi
    port="$(free_port)"
    grpc="$(free_port)"
    url="http://127.0.0.1:$port"
    # setsid: the server has its own process group, so `stop` ends it and its workers together.
    PHOENIX_HOST=127.0.0.1 PHOENIX_PORT="$port" PHOENIX_GRPC_PORT="$grpc" \
        PHOENIX_WORKING_DIR="$dir/data" PHOENIX_TELEMETRY_ENABLED=false \
        setsid "$venv/bin/python" -m phoenix.server.main serve >"$dir/server.log" 2>&1 </dev/null &
    pid=$!
    echo "$pid" >"$dir/pid"
    waited=0
    until ready "$url"; do
        if ! kill -0 "$pid" 2>/dev/null; then
            say "the server exited before it answered; last log lines:"
            tail -n 20 "$dir/server.log" >&2
            rm -rf "$dir"
            exit 1
        fi
        if [ "$waited" -ge 300 ]; then
            say "the server did not answer within 300 s; last log lines:"
            tail -n 20 "$dir/server.log" >&2
            kill -- "-$pid" 2>/dev/null || true
            rm -rf "$dir"
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "$url" >"$dir/url"
    say "server on $url after ${waited} s, data in $dir"
    echo "$dir"
}

stop() {
    local dir="$1" pid
    if [ -f "$dir/pid" ]; then
        pid="$(cat "$dir/pid")"
        kill -- "-$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        kill -9 -- "-$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}

command="${1:-}"
case "$command" in
    install) install ;;
    start) start "${2:-}" ;;
    stop) stop "$2" ;;
    *)
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
