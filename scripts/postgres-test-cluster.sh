#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the postgres store's tests and benchmark: Debian's server
# binaries, a temporary directory, a free port on 127.0.0.1, run as a non-root user (the server
# refuses root), fsync on (the store refuses a server without it).
#
#   scripts/postgres-test-cluster.sh install        install Debian's postgresql if missing (root)
#   scripts/postgres-test-cluster.sh bindir         print the server binaries' directory (exit 1
#                                                   when there are none)
#   scripts/postgres-test-cluster.sh start [DIR]    new cluster in DIR (default: a new temp dir);
#                                                   prints DIR; the URL is in DIR/url
#   scripts/postgres-test-cluster.sh url DIR        print the cluster's URL
#   scripts/postgres-test-cluster.sh pause DIR      stop the server, keep its data and port
#   scripts/postgres-test-cluster.sh resume DIR     start it again on the same port
#   scripts/postgres-test-cluster.sh stop DIR       stop the server and delete DIR
#
# The tests read the URL from POLYLOOP_TEST_POSTGRES_URL, e.g.
#   dir="$(bash scripts/postgres-test-cluster.sh start)"
#   export POLYLOOP_TEST_POSTGRES_URL="$(cat "$dir/url")"
#   ... ; bash scripts/postgres-test-cluster.sh stop "$dir"
set -euo pipefail
# runuser is in /usr/sbin, which PATH may lack.
source "$(dirname "${BASH_SOURCE[0]}")/sbin-path.sh"

say() { echo "postgres-test-cluster: $*" >&2; }

bindir() {
    local dir
    for dir in /usr/lib/postgresql/15/bin $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -rV); do
        [ -x "$dir/initdb" ] && { echo "$dir"; return 0; }
    done
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        pg_config --bindir
        return 0
    fi
    return 1
}

install() {
    bindir >/dev/null && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "no PostgreSQL server binaries found; install Debian's 'postgresql' package (or point"
        say "POLYLOOP_TEST_POSTGRES_URL at your own server)"
        return 1
    fi
    say "installing Debian's postgresql (without its default cluster)"
    mkdir -p /etc/postgresql-common
    # Debian's package would create and start a cluster of its own; ours are throwaway.
    [ -f /etc/postgresql-common/createcluster.conf ] ||
        echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.conf
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold postgresql; } \
        >/tmp/polyloop-apt-postgresql.log 2>&1 || {
        say "apt-get failed:"; tail -n 20 /tmp/polyloop-apt-postgresql.log >&2; return 1
    }
    bindir >/dev/null
}

# Run a server binary as the cluster's owner: ourselves, or (as root) the postgres user.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        local owner=postgres
        id "$owner" >/dev/null 2>&1 || owner=nobody
        # From /: the caller's directory may be one the owner cannot enter (a mktemp -d clone).
        (cd / && runuser -u "$owner" -- "$@")
    else
        "$@"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

server_start() {
    local dir="$1" bin port
    bin="$(cat "$dir/bindir")"
    port="$(cat "$dir/port")"
    as_owner "$bin/pg_ctl" start -w -t 60 -D "$dir/data" -l "$dir/server.log" \
        -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$dir" >/dev/null
}

start() {
    local dir="${1:-}" bin password attempt port
    install >/dev/null || exit 1
    bin="$(bindir)"
    if [ -z "$dir" ]; then
        dir="$(mktemp -d "${TMPDIR:-/tmp}/polyloop-pg.XXXXXX")"
    else
        mkdir -p "$dir"
    fi
    password="$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
    echo "$bin" >"$dir/bindir"
    printf '%s\n' "$password" >"$dir/password"
    chmod 700 "$dir"
    [ "$(id -u)" = 0 ] && chown -R "$(id -u postgres 2>/dev/null || id -u nobody)" "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U polyloop --pwfile="$dir/password" \
        --auth-local=trust --auth-host=scram-sha-256 --encoding=UTF8 --locale=C --no-sync \
        >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; rm -rf "$dir"; exit 1; }
    cat >>"$dir/data/postgresql.conf" <<'CONF'
# polyloop test cluster
fsync = on
max_connections = 300
shared_buffers = 64MB
log_min_messages = warning
log_connections = off
CONF
    for attempt in 1 2 3 4 5; do
        port="$(free_port)"
        echo "$port" >"$dir/port"
        if server_start "$dir"; then
            echo "postgresql://polyloop:$password@127.0.0.1:$port/postgres" >"$dir/url"
            say "server on 127.0.0.1:$port, data in $dir"
            echo "$dir"
            return 0
        fi
        say "start on port $port failed (attempt $attempt); last log lines:"
        tail -n 5 "$dir/server.log" >&2 || true
    done
    rm -rf "$dir"
    exit 1
}

stop_server() {
    local dir="$1"
    [ -f "$dir/data/postmaster.pid" ] || return 0
    as_owner "$(cat "$dir/bindir")/pg_ctl" stop -w -t 60 -m fast -D "$dir/data" >/dev/null
}

command="${1:-}"
case "$command" in
    install) install ;;
    bindir) bindir ;;
    start) start "${2:-}" ;;
    url) cat "$2/url" ;;
    pause) stop_server "$2" ;;
    resume) server_start "$2" ;;
    stop)
        stop_server "$2" || true
        rm -rf "$2"
        ;;
    *)
        sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//' >&2
        exit 2
        ;;
esac
