#!/usr/bin/env bash
# What the test suite needs beyond Python, checked before any test runs (scripts/test.sh calls
# this first) and installed here when this user may: the container executor's two sandbox
# backends (bubblewrap; a running Docker Engine, Debian's docker.io started without systemd),
# PostgreSQL's server binaries (scripts/postgres-test-cluster.sh starts throwaway clusters of
# them), git (the MCP git server's tests), /usr/bin/python3 (the sandbox image is built from it)
# and, as root, runuser (the cluster runs as the postgres user).
#
#   scripts/preflight.sh check      one line per missing part, with the command that provides
#                                   it; exit 1 when anything is missing
#   scripts/preflight.sh install    install and start the missing parts (root, or passwordless
#                                   sudo), then check
#   scripts/preflight.sh            install when this user may, else check
#
# Tools are found whatever PATH holds (scripts/sbin-path.sh adds the sbin directories).
# .ci/install-system is this script's `install`; there is one copy of the logic, here.
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$here/sbin-path.sh"

say() { echo "preflight: $*" >&2; }

is_root() { [ "$(id -u)" = 0 ]; }
may_install() { is_root || { command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; }; }
# The prefix a user who is not root puts before a command that needs root.
root_prefix() { is_root || echo "sudo "; }

docker_answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# Each missing part: "what is missing|the command that provides it".
missing_parts() {
    local sudo
    sudo="$(root_prefix)"
    command -v bwrap >/dev/null 2>&1 ||
        echo "bubblewrap (bwrap, the container executor's light backend)|${sudo}apt-get install -y bubblewrap"
    if ! command -v dockerd >/dev/null 2>&1 || ! command -v docker >/dev/null 2>&1; then
        echo "Docker Engine (dockerd and docker, the container executor's docker backend)|${sudo}apt-get install -y docker.io && ${sudo}bash scripts/preflight.sh install"
    elif ! docker_answers; then
        if [[ "$(timeout 10 docker version 2>&1)" == *"permission denied"* ]]; then
            echo "access to the running Docker Engine (its socket refuses $(id -un))|${sudo}usermod -aG docker $(id -un), then log in again"
        else
            echo "a running Docker Engine (docker version gets no answer from a daemon)|${sudo}bash scripts/preflight.sh install"
        fi
    fi
    bash "$here/postgres-test-cluster.sh" bindir >/dev/null 2>&1 ||
        echo "PostgreSQL server binaries (initdb, pg_ctl; the postgres store's tests)|${sudo}apt-get install -y postgresql"
    if is_root && ! command -v runuser >/dev/null 2>&1; then
        echo "runuser (runs the test cluster as the postgres user)|apt-get install -y util-linux"
    fi
    command -v git >/dev/null 2>&1 ||
        echo "git (the MCP git server's tests)|${sudo}apt-get install -y git"
    [ -x /usr/bin/python3 ] ||
        echo "/usr/bin/python3 (the sandbox image is built from it)|${sudo}apt-get install -y python3-minimal"
    [ -x /usr/bin/chromium ] ||
        echo "/usr/bin/chromium (the browser tests of polyloop view)|${sudo}apt-get install -y chromium"
}

check() {
    local parts line count=0
    parts="$(missing_parts)"
    [ -z "$parts" ] && return 0
    while IFS= read -r line; do
        say "missing ${line%%|*} -- run: ${line#*|}"
        count=$((count + 1))
    done <<<"$parts"
    say "$count part(s) the tests need are missing; the commands above provide them (as root, \`bash scripts/preflight.sh install\` runs them all)"
    return 1
}

running() {
    local pid="$1" state
    [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
    state="$(sed 's/.*) //' "/proc/$pid/stat" | cut -d' ' -f1)"
    [ "$state" != "Z" ]
}

start_dockerd() {
    # Stale pid files from a daemon killed with the previous session stop a new one.
    # A killed daemon may linger as a zombie (this machine's init does not always reap it):
    # that counts as gone.
    local pidfile
    for pidfile in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
        if [ -f "$pidfile" ] && ! running "$(cat "$pidfile" 2>/dev/null)"; then
            rm -f "$pidfile"
        fi
    done
    say "starting dockerd $*"
    setsid nohup dockerd --iptables=false --ip6tables=false --bridge=none "$@" \
        >"/var/log/polyloop-dockerd${1:+-vfs}.log" 2>&1 </dev/null &
    for _ in $(seq 1 60); do
        docker_answers && return 0
        sleep 0.5
    done
    return 1
}

ensure_dockerd() {
    command -v dockerd >/dev/null 2>&1 || return 0
    docker_answers && return 0
    start_dockerd && { say "Docker Engine answers"; return 0; }
    say "dockerd did not answer with the default storage driver; retrying with vfs"
    local old_pid
    old_pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
    if running "$old_pid"; then kill "$old_pid" 2>/dev/null; sleep 2; fi
    start_dockerd --storage-driver=vfs && { say "Docker Engine answers (vfs)"; return 0; }
    say "dockerd failed to start; last lines of its log:"
    tail -n 20 /var/log/polyloop-dockerd-vfs.log >&2
}

install_as_root() {
    local need=() pkgs=(bubblewrap docker.io python3-minimal util-linux git chromium) pkg
    # Docker needs AppArmor's parser only where the kernel has AppArmor enabled.
    [ -d /sys/module/apparmor ] && pkgs+=(apparmor)
    if command -v dpkg-query >/dev/null 2>&1; then
        for pkg in "${pkgs[@]}"; do
            dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
        done
    fi
    if [ "${#need[@]}" -gt 0 ]; then
        say "installing ${need[*]}"
        export DEBIAN_FRONTEND=noninteractive
        if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/tmp/polyloop-apt.log 2>&1; then
            say "apt-get failed; last lines of /tmp/polyloop-apt.log:"
            tail -n 20 /tmp/polyloop-apt.log >&2
        fi
    fi
    bash "$here/postgres-test-cluster.sh" install || true
    ensure_dockerd
}

install() {
    if is_root; then
        install_as_root
    elif may_install; then
        sudo -n env "PATH=$PATH" bash "$here/preflight.sh" install-as-root
    else
        say "not root and no passwordless sudo: nothing installed"
    fi
    check
}

case "${1:-auto}" in
    check) check ;;
    install) install ;;
    install-as-root) install_as_root ;;
    auto)
        # Quick when nothing is missing: no apt, no sudo.
        missing="$(missing_parts)"
        if [ -z "$missing" ]; then exit 0; fi
        if may_install; then install; else check; fi
        ;;
    *)
        sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
