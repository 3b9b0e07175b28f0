#!/usr/bin/env bash
# What the test suite needs beyond Python, checked before any test runs (scripts/test.sh calls
# this first) and installed here when this user may: the container executor's two sandbox
# backends (bubblewrap; a running Docker Engine, Debian's docker.io started without systemd),
# PostgreSQL's server binaries (scripts/postgres-test-cluster.sh starts throwaway clusters of
# them), git (the MCP git server's tests), /usr/bin/python3 (the sandbox image is built from it)
# and, as root, runuser (the cluster runs as the postgres user).
#
#   scripts/preflight.sh check      one line per missing part, with the command that provides
#                                   it, and per part that is there but does not work, with
#                                   what it said and the fix; exit 1 when anything is wrong
#   scripts/preflight.sh install    install and start the missing parts (root, or passwordless
#                                   sudo), then check
#   scripts/preflight.sh            install when this user may, else check
#
# A part is checked by using it as the tests do: bubblewrap starts a sandbox, Docker runs a
# container, PostgreSQL's binaries start a throwaway cluster, chromium renders a page; a binary
# that is present but cannot (no user namespaces, a daemon that cannot start containers) stops
# the run here, named, rather than as dozens of failed tests.
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
    [ -n "$(chromium_path)" ] ||
        echo "/usr/bin/chromium (the browser tests of polyloop view)|${sudo}apt-get install -y chromium"
    { command -v cc && command -v c++; } >/dev/null 2>&1 ||
        echo "a C and C++ compiler (cc, c++: the test model's llama-cpp-python is built from source)|${sudo}apt-get install -y g++"
}

# chromium on PATH, else Debian's (the browser tests use /usr/bin/chromium).
chromium_path() { command -v chromium 2>/dev/null || { [ -x /usr/bin/chromium ] && echo /usr/bin/chromium; }; }

# The first line of a failed check's output, for the report.
first_words() { grep -m1 -v '^[[:space:]]*$' | cut -c1-200; }

# Why unprivileged user namespaces (bubblewrap's sandbox) are refused here, as the fix.
userns_fix() {
    local sudo="$1"
    if [ "$(cat /proc/sys/kernel/apparmor_restrict_unprivileged_userns 2>/dev/null)" = 1 ]; then
        echo "${sudo}sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (Ubuntu 24.04's AppArmor rule; or give bwrap an AppArmor profile that allows userns)"
    elif [ "$(cat /proc/sys/kernel/unprivileged_userns_clone 2>/dev/null)" = 0 ]; then
        echo "${sudo}sysctl -w kernel.unprivileged_userns_clone=1"
    elif [ "$(cat /proc/sys/user/max_user_namespaces 2>/dev/null)" = 0 ]; then
        echo "${sudo}sysctl -w user.max_user_namespaces=15000"
    else
        echo "run the tests where unprivileged user namespaces are allowed (in a container: one started with a seccomp profile that allows unshare and clone with CLONE_NEWUSER, e.g. --security-opt seccomp=unconfined)"
    fi
}

sandbox_works() {
    # As the container backend starts it: as root, dropped to an unprivileged user first.
    local prefix=()
    if is_root; then
        command -v setpriv >/dev/null 2>&1 || { echo "setpriv is missing (util-linux)"; return 1; }
        prefix=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
    fi
    timeout 30 "${prefix[@]}" bwrap --unshare-all --unshare-user --die-with-parent --new-session \
        --ro-bind / / --proc /proc --dev /dev --tmpfs /tmp true 2>&1
}

# A container from an image of /usr/bin/true and its libraries (no registry here), run with the
# docker backend's restrictions; the image is kept for the next check.
container_runs() {
    local image=polyloop-preflight:1 files
    if ! timeout 30 docker image inspect "$image" >/dev/null 2>&1; then
        files="$(ldd /usr/bin/true 2>/dev/null | grep -o '/[^ ]*' | sort -u | tr '\n' ' ')" || return 1
        # shellcheck disable=SC2086
        tar -chf - /usr/bin/true $files 2>/dev/null | timeout 60 docker import - "$image" >/dev/null 2>&1 ||
            { echo "docker import of a one-binary image failed"; return 1; }
    fi
    timeout 60 docker run --rm --network none --read-only --cap-drop ALL --user 65534:65534 \
        --log-driver none "$image" /usr/bin/true 2>&1
}

cluster_starts() {
    local dir
    dir="$(bash "$here/postgres-test-cluster.sh" start 2>"${TMPDIR:-/tmp}/polyloop-preflight-pg.$$")" || {
        first_words <"${TMPDIR:-/tmp}/polyloop-preflight-pg.$$"
        rm -f "${TMPDIR:-/tmp}/polyloop-preflight-pg.$$"
        return 1
    }
    rm -f "${TMPDIR:-/tmp}/polyloop-preflight-pg.$$"
    bash "$here/postgres-test-cluster.sh" stop "$dir"
}

page_renders() {
    local profile out
    profile="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-preflight-chromium.XXXXXX")" || return 1
    # --no-sandbox: the tests run chromium so too (as root its own sandbox cannot start).
    out="$(timeout 60 "$(chromium_path)" --headless --no-sandbox --disable-gpu \
        --user-data-dir="$profile" --dump-dom 'data:text/html,<p>polyloop-preflight</p>' 2>&1)"
    rm -rf "$profile"
    [[ "$out" == *"<p>polyloop-preflight</p>"* ]] || { echo "$out"; return 1; }
}

# Each part that is there but does not work: "what fails: what it said|the fix".
broken_parts() {
    local sudo said
    sudo="$(root_prefix)"
    if command -v bwrap >/dev/null 2>&1 && ! said="$(sandbox_works)"; then
        echo "bubblewrap cannot create a sandbox: $(first_words <<<"$said")|$(userns_fix "$sudo")"
    fi
    if command -v docker >/dev/null 2>&1 && docker_answers && ! said="$(container_runs)"; then
        echo "Docker Engine answers but cannot run a container: $(first_words <<<"$said")|${sudo}bash scripts/preflight.sh install (restarts dockerd with the vfs storage driver when the default one fails; its log: /var/log/polyloop-dockerd*.log)"
    fi
    if bash "$here/postgres-test-cluster.sh" bindir >/dev/null 2>&1 && ! said="$(cluster_starts)"; then
        echo "PostgreSQL's binaries do not start a cluster (initdb, pg_ctl): $(first_words <<<"$said")|bash scripts/postgres-test-cluster.sh start, which says why in full (the tests that stop and restart a server start clusters of their own, so a server named by POLYLOOP_TEST_POSTGRES_URL does not replace the binaries)"
    fi
    if [ -n "$(chromium_path)" ] && ! said="$(page_renders)"; then
        echo "chromium does not render a page (headless --dump-dom): $(first_words <<<"$said")|${sudo}apt-get install -y --reinstall chromium (and its libraries: apt-get -f install)"
    fi
}

check() {
    local parts broken line count=0
    parts="$(missing_parts)"
    broken="$(broken_parts)"
    [ -z "$parts$broken" ] && return 0
    if [ -n "$parts" ]; then
        while IFS= read -r line; do
            say "missing ${line%%|*} -- run: ${line#*|}"
            count=$((count + 1))
        done <<<"$parts"
        say "$count part(s) the tests need are missing; the commands above provide them (as root, \`bash scripts/preflight.sh install\` runs them all)"
    fi
    count=0
    if [ -n "$broken" ]; then
        while IFS= read -r line; do
            say "not working: ${line%%|*} -- fix: ${line#*|}"
            count=$((count + 1))
        done <<<"$broken"
        say "$count part(s) the tests need are installed but do not work; fix them as above, then rerun"
    fi
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
    docker_answers && container_runs >/dev/null && return 0
    if ! docker_answers; then
        start_dockerd && container_runs >/dev/null && { say "Docker Engine runs containers"; return 0; }
    fi
    say "dockerd did not answer or run a container with the default storage driver; retrying with vfs"
    local old_pid
    old_pid="$(cat /var/run/docker.pid 2>/dev/null || true)"
    if running "$old_pid"; then kill "$old_pid" 2>/dev/null; sleep 2; fi
    start_dockerd --storage-driver=vfs && { say "Docker Engine answers (vfs)"; return 0; }
    say "dockerd failed to start; last lines of its log:"
    tail -n 20 /var/log/polyloop-dockerd-vfs.log >&2
}

install_as_root() {
    local need=() pkgs=(bubblewrap docker.io python3-minimal util-linux git chromium g++) pkg
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
        # Quick when nothing is missing: no apt, no sudo; each part is still tried.
        missing="$(missing_parts)"
        if [ -z "$missing" ]; then check; exit; fi
        if may_install; then install; else check; fi
        ;;
    *)
        sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
