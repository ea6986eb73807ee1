#!/usr/bin/env bash
# Stands in for the server binary in scripts/conformance/run.sh:
# it is started as `behind_pgbouncer.sh serve --bind …` with DATABASE_URL
# naming the runner's PostgreSQL, and starts PgBouncer in transaction
# pooling mode (4 server connections, fewer than the server's pool) in
# front of that database, then $PLACEMENT_REAL_BIN through it with
# `--db-pooler transaction` and the direct URL as the session URL. Both go
# when it is told to stop.
#
#   PLACEMENT_REAL_BIN=target/release/placement \
#       bash scripts/conformance/run.sh scripts/behind_pgbouncer.sh main
set -euo pipefail

BIN=${PLACEMENT_REAL_BIN:?set PLACEMENT_REAL_BIN to the placement binary}
PGBOUNCER=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null || true)
[ -n "$PGBOUNCER" ] || { echo "pgbouncer is not installed: apt-get install pgbouncer" >&2; exit 1; }

direct=${DATABASE_URL:?}
rest=${direct#*://}
user=${rest%%@*}
rest=${rest#*@}
hostport=${rest%%/*}
db=${rest#*/}
db=${db%%\?*}
host=${hostport%:*}
port=${hostport##*:}

dir=$(mktemp -d /tmp/pgbouncer.XXXXXX)
pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$dir/pgbouncer.ini" <<INI
[databases]
* = host=$host port=$port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $pport
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 1000
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
printf '"%s" ""\n' "$user" >"$dir/users.txt"
# PgBouncer refuses to run as root.
if [ "$(id -u)" = 0 ]; then
    chown -R postgres "$dir"
    runuser -u postgres -- "$PGBOUNCER" -d "$dir/pgbouncer.ini"
else
    "$PGBOUNCER" -d "$dir/pgbouncer.ini"
fi

srv=""
stop() {
    [ -z "$srv" ] || { kill -TERM "$srv" 2>/dev/null || true; wait "$srv" 2>/dev/null || true; }
    if [ -f "$dir/pgbouncer.pid" ]; then
        pid=$(cat "$dir/pgbouncer.pid")
        kill -INT "$pid" 2>/dev/null || true
        for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill -9 "$pid" 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap 'stop; exit 0' TERM INT
trap stop EXIT

for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$pport") 2>/dev/null && break
    sleep 0.05
done
DATABASE_URL="postgres://$user@127.0.0.1:$pport/$db" \
    PLACEMENT_DB_POOLER=transaction \
    PLACEMENT_DATABASE_SESSION_URL="$direct" \
    "$BIN" "$@" &
srv=$!
wait "$srv"
