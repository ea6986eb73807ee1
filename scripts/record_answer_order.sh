#!/usr/bin/env bash
# Records the order of the real Placement's answers for
# tests/answer_order.rs (tests/data/placement-answer-order.json):
#
#   bash scripts/record_answer_order.sh
#
# openstack-placement 16.0.0 (the cached venv of lib.sh) under gunicorn runs
# scripts/answer_order.py's history twice: on MariaDB under PyMySQL, as most
# deployment tools keep it, and on SQLite, as Placement's and
# osc-placement's functional fixtures run it. An order the two disagree on
# is the query plan's, not Placement's, and is marked so; MariaDB's answers
# are kept. Run by hand when the history changes; the test command replays
# the recording, it does not record.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
VENV=$(placement_venv)
OUT=tests/data/placement-answer-order.json

WORK=$(mktemp -d /tmp/answer-order.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do stop "$p"; done
    stop_mariadb "$WORK/mariadb"
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cat >"$WORK/pl_app.py" <<'PY'
import sys; sys.argv = sys.argv[:1]
from placement.wsgi.api import application  # noqa
PY

# serve NAME CONNECTION: Placement on CONNECTION, synced; sets URL.
serve() {
    mkdir -p "$WORK/$1"
    printf '[placement_database]\nconnection = %s\n[api]\nauth_strategy = noauth2\n' "$2" \
        >"$WORK/$1/placement.conf"
    "$VENV/bin/placement-manage" --config-file "$WORK/$1/placement.conf" db sync \
        >"$WORK/$1/sync.log" 2>&1 || { cat "$WORK/$1/sync.log" >&2; exit 1; }
    local port
    port=$(free_port)
    OS_PLACEMENT_CONFIG_DIR=$WORK/$1 "$VENV/bin/gunicorn" --chdir "$WORK" \
        --bind "127.0.0.1:$port" --workers 1 pl_app:application >"$WORK/$1/log" 2>&1 &
    PIDS+=($!)
    URL=http://127.0.0.1:$port
    wait_for "$URL/" "${PIDS[-1]}" "$WORK/$1/log"
}

start_mariadb "$WORK/mariadb"
mariadb --no-defaults -S "$MY_SOCK" -e "
    CREATE DATABASE placement CHARACTER SET utf8;
    CREATE USER 'placement'@'127.0.0.1' IDENTIFIED BY 'pw';
    GRANT ALL ON placement.* TO 'placement'@'127.0.0.1';"
serve mariadb "mysql+pymysql://placement:pw@127.0.0.1:$MY_PORT/placement?charset=utf8"
"$VENV/bin/python" scripts/answer_order.py record "$URL" "$WORK/mariadb.json"

serve sqlite "sqlite:///$WORK/sqlite/placement.db"
"$VENV/bin/python" scripts/answer_order.py record "$URL" "$WORK/sqlite.json"

python3 scripts/answer_order.py merge "$WORK/mariadb.json" "$WORK/sqlite.json" "$OUT"
echo "recorded $OUT"
