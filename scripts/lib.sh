# Helpers shared by the test command and its checks (test.sh, the
# conformance runner, osc_check.sh, keystone_check.sh, import_check.sh,
# docs_check.sh); sourced, not run.

# release_bin NAME [BINARY]: the absolute path of the server binary
# (default target/release/placement); fails, saying so, when it is not built.
#   BIN=$(release_bin osc_check "${1:-}") || exit 2
release_bin() {
    local bin=${2:-target/release/placement}
    [ -x "$bin" ] || { echo "$1: $bin is not built (cargo build --release)" >&2; return 2; }
    echo "$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
}

# as_pg COMMAND...: as the postgres user when root (PostgreSQL refuses to
# run as root), as ourselves otherwise.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

# start_postgres DIR: a throwaway cluster in DIR/data (socket in DIR, log
# DIR/log), not durable, listening on 127.0.0.1 at the first port from
# 54330 where it starts; sets PGBIN and PGPORT. A port nobody listens on
# can still be taken (a client connection's own port comes from the same
# range), and then the start fails: the next is tried.
start_postgres() {
    local dir=$1 p
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
    [ -n "$PGBIN" ] || { echo "PostgreSQL is not installed: apt-get install postgresql, or set DATABASE_URL" >&2; return 1; }
    chmod 755 "$dir"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir"; fi
    as_pg "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-locale --no-sync >/dev/null
    for p in $(seq 54330 54429); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
        if as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/log" -w -t 30 \
            -o "-p $p -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300" \
            start >/dev/null; then
            PGPORT=$p
            return 0
        fi
    done
    cat "$dir/log" >&2
    echo "PostgreSQL started on no port in 54330-54429" >&2
    return 1
}

# stop_postgres DIR: stops start_postgres's cluster (no-op when none).
stop_postgres() {
    [ -n "${PGBIN:-}" ] || return 0
    as_pg "$PGBIN/pg_ctl" -D "$1/data" -m immediate stop >/dev/null 2>&1 || true
}

# ensure_venv DIR MODULES PACKAGE...: a venv at DIR where `import MODULES`
# works, installing PACKAGE... into it the first time (then cached).
ensure_venv() {
    local dir=$1 modules=$2
    shift 2
    if ! "$dir/bin/python" -c "import $modules" 2>/dev/null; then
        echo "==> installing $* into $dir"
        python3 -m venv "$dir"
        "$dir/bin/pip" install -q --disable-pip-version-check "$@"
    fi
}

# free_port: a loopback port nobody listens on now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_for URL PID LOG: until URL answers; fails with LOG's tail if the
# process PID exits or a minute passes.
wait_for() {
    for _ in $(seq 600); do
        if curl -sf -o /dev/null "$1"; then return 0; fi
        kill -0 "$2" 2>/dev/null || { echo "FAILED: the process for $1 exited:" >&2; tail -n 30 "$3" >&2; exit 1; }
        sleep 0.1
    done
    echo "FAILED: $1 never answered" >&2; tail -n 30 "$3" >&2; exit 1
}

# stop PID: SIGTERM, up to 10 s, then SIGKILL (no-op without a PID).
stop() {
    [ -n "${1:-}" ] || return 0
    kill "$1" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$1" 2>/dev/null || true
}

# placement_venv: the path of the venv holding the real OpenStack Placement
# 16.0.0 (its gabbits, its policy rules, and the server the import check
# runs, on PostgreSQL and on MariaDB through PyMySQL) with gabbi, installed
# the first time (then cached). Prints the path.
placement_venv() {
    local venv=${PLACEMENT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/placement-real/venv}
    ensure_venv "$venv" "placement, psycopg2, pymysql, gunicorn, gabbi" \
        'openstack-placement==16.0.0' psycopg2-binary PyMySQL gunicorn 'gabbi==4.2.3' >&2
    echo "$venv"
}

# start_mariadb DIR [ARG...]: a throwaway MariaDB in DIR/data (socket
# DIR/sock, log DIR/log) on 127.0.0.1 at a free port, the server given the
# ARGs too (e.g. --ssl-cert=...); sets MY_PORT and MY_SOCK. As root the
# server runs as `mysql`; its root account is reached through the socket by
# the user who started it (unix_socket authentication).
start_mariadb() {
    local dir=$1 mysqld user=()
    shift
    mysqld=$(command -v mariadbd || command -v mysqld || ls /usr/sbin/mariadbd 2>/dev/null || true)
    [ -n "$mysqld" ] || { echo "MariaDB is not installed: apt-get install mariadb-server" >&2; return 1; }
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then chown mysql: "$dir"; user=(--user=mysql); fi
    mariadb-install-db --no-defaults "${user[@]}" --datadir="$dir/data" --skip-test-db \
        --auth-root-authentication-method=socket >"$dir/install.log" 2>&1 \
        || { cat "$dir/install.log" >&2; return 1; }
    MY_PORT=$(free_port)
    MY_SOCK=$dir/sock
    "$mysqld" --no-defaults "${user[@]}" --datadir="$dir/data" --socket="$MY_SOCK" \
        --pid-file="$dir/pid" --port="$MY_PORT" --bind-address=127.0.0.1 --skip-name-resolve \
        --log-error="$dir/log" "$@" >"$dir/out" 2>&1 &
    for _ in $(seq 300); do [ -S "$MY_SOCK" ] && return 0; sleep 0.1; done
    cat "$dir/log" >&2
    echo "MariaDB did not start" >&2
    return 1
}

# stop_mariadb DIR: stops start_mariadb's server and waits for it (no-op
# when none).
stop_mariadb() {
    local pid
    [ -f "$1/pid" ] || return 0
    pid=$(cat "$1/pid")
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}
