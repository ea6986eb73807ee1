#!/usr/bin/env bash
# Takes over from a real OpenStack Placement, as an operator would:
#
#   bash scripts/import_check.sh [BINARY]    (default: target/release/placement)
#
# 1. openstack-placement 16.0.0 from PyPI (cached venv) under gunicorn, on a
#    throwaway PostgreSQL; populated through its API (nested trees with
#    NUMA and PFs, a sharing provider in an aggregate, custom classes and
#    traits, consumers of several projects and types, a migration that
#    moves allocations between consumers, a reshape).
# 2. `placement import` refuses what it must (a database that is not
#    Placement's, an older or unknown schema revision, a non-empty target),
#    a --dry-run writes nothing, then the import copies it into a fresh
#    database.
# 3. Our server on the result answers every GET exactly as Placement does:
#    providers, inventories, traits, aggregates, usages, allocations per
#    consumer and per provider, allocation candidates, generations included.
#    A backup (pg_dump) restored into a fresh database as docs/deploying.md
#    says passes `upgrade check` and `audit` and answers the same.
# 4. Allocations without a consumer row (data from before 1.8).
# 5. `placement upgrade check` against placement-status's on the same
#    Placement databases (healthy, a consumer row missing, a root provider
#    id missing): the same checks, words and exit codes; and on ours after
#    the import.
# 6. All of it again with Placement on MariaDB under PyMySQL, as
#    kolla-ansible, openstack-ansible and TripleO run it: the URL as they
#    write it (and TripleO's read_default_file), ratios MySQL keeps in
#    single precision (0.9, 1.5, 3.3) given back as they were set.
#
# Venv: ${PLACEMENT_VENV:-~/.cache/placement-real/venv}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin import_check "${1:-}") || exit 2
HERE=$(pwd)/scripts

VENV=$(placement_venv)

WORK=$(mktemp -d /tmp/import-check.XXXXXX)
chmod 755 "$WORK"
PIDS=()
cleanup() {
    for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
    stop_mariadb "$WORK/mariadb"
    stop_postgres "$WORK"
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "FAILED: $*" >&2; exit 1; }

# --- a throwaway PostgreSQL ---------------------------------------------------------
start_postgres "$WORK"
# Our side runs as deployment tools create the role: a plain owner of its
# database (OURS), never a superuser; Placement's side as the cluster's owner.
"$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE placement LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"
for db in legacy other; do "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres "$db"; done
for db in ours ours2; do "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres -O placement "$db"; done
PG=postgres@127.0.0.1:$PGPORT
OURS=placement@127.0.0.1:$PGPORT

# --- 1. the real Placement --------------------------------------------------------------
echo "==> openstack-placement 16.0.0 on PostgreSQL"
cat >"$WORK/placement.conf" <<CONF
[placement_database]
connection = postgresql+psycopg2://$PG/legacy
[api]
auth_strategy = noauth2
CONF
"$VENV/bin/placement-manage" --config-file "$WORK/placement.conf" db sync >"$WORK/sync.log" 2>&1 \
    || { cat "$WORK/sync.log" >&2; fail "placement-manage db sync"; }
cat >"$WORK/pl_app.py" <<'PY'
import sys; sys.argv = sys.argv[:1]
from placement.wsgi.api import application  # noqa
PY
OLD_PORT=$(free_port)
OS_PLACEMENT_CONFIG_DIR=$WORK "$VENV/bin/gunicorn" --chdir "$WORK" --bind "127.0.0.1:$OLD_PORT" \
    --workers 1 pl_app:application >"$WORK/placement.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$OLD_PORT/" "${PIDS[-1]}" "$WORK/placement.log"
"$VENV/bin/python" "$HERE/import_check.py" populate "http://127.0.0.1:$OLD_PORT"

# --- 2. the import ----------------------------------------------------------------------
echo "==> placement import"
step() { printf ' - %s\n' "$1"; }
step "a database that is not Placement's is refused"
if OUT=$("$BIN" import --from "postgresql://$PG/other" --database-url "postgresql://$OURS/ours" 2>&1); then
    fail "imported from a non-Placement database: $OUT"
fi
grep -q "not a Placement database" <<<"$OUT" || fail "unclear refusal: $OUT"
q() { psql -h 127.0.0.1 -p "$PGPORT" -U postgres -d "$1" -tAc "$2"; }
for rev in 422ece571366:older ffffffffffff:"does not know"; do
    step "a schema at revision ${rev%%:*} is refused"
    q legacy "UPDATE alembic_version SET version_num = '${rev%%:*}'" >/dev/null
    if OUT=$("$BIN" import --from "postgresql://$PG/legacy" --database-url "postgresql://$OURS/ours" 2>&1); then
        fail "imported revision ${rev%%:*}: $OUT"
    fi
    grep -q "${rev#*:}" <<<"$OUT" || fail "unclear refusal: $OUT"
done
q legacy "UPDATE alembic_version SET version_num = 'a082b8bb98d0'" >/dev/null
step "--dry-run verifies and writes nothing"
"$BIN" import --from "postgresql+psycopg2://$PG/legacy" --database-url "postgresql://$OURS/ours" --dry-run \
    | tee "$WORK/dry.txt"
grep -q "no data was written" "$WORK/dry.txt" || fail "dry run report"
n=$(q ours "SELECT COUNT(*) FROM resource_providers")
[ "$n" = 0 ] || fail "the dry run wrote $n providers"
step "the import, both URLs from the environment (as docs/migrating.md's recipe)"
PLACEMENT_IMPORT_FROM="postgresql+psycopg2://$PG/legacy" DATABASE_URL="postgresql://$OURS/ours" "$BIN" import
step "a second import into the now non-empty database is refused"
if OUT=$("$BIN" import --from "postgresql://$PG/legacy" --database-url "postgresql://$OURS/ours" 2>&1); then
    fail "imported twice: $OUT"
fi
grep -q "not empty" <<<"$OUT" || fail "unclear refusal: $OUT"
step "after a rollback, the owner role empties its database and imports again (docs/migrating.md)"
psql "postgresql://$OURS/ours" -q -v ON_ERROR_STOP=1 -c 'DROP SCHEMA public CASCADE' -c 'CREATE SCHEMA public' \
    2>"$WORK/empty.txt" || { cat "$WORK/empty.txt" >&2; fail "the owner role could not empty its database"; }
PLACEMENT_IMPORT_FROM="postgresql+psycopg2://$PG/legacy" DATABASE_URL="postgresql://$OURS/ours" "$BIN" import >/dev/null \
    || fail "the import into the emptied database"

# --- 3. both servers answer alike -------------------------------------------------------------
NEW_PORT=$(free_port)
DATABASE_URL="postgresql://$OURS/ours" RUST_LOG=warn "$BIN" serve --bind "127.0.0.1:$NEW_PORT" \
    >"$WORK/ours.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$NEW_PORT/" "${PIDS[-1]}" "$WORK/ours.log"
echo "==> every GET, Placement against ours"
python3 "$HERE/import_check.py" compare "http://127.0.0.1:$OLD_PORT" "http://127.0.0.1:$NEW_PORT" \
    || fail "the imported service answers differently"
# --- 3b. a backup, restored as docs/deploying.md says, serves the same ---------------------
echo "==> the runbook's backup and restore"
"$PGBIN/pg_dump" --format=custom --file="$WORK/backup.dump" "postgresql://$OURS/ours"
"$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres -O placement restored
"$PGBIN/pg_restore" --no-owner --role=placement --dbname="postgresql://$OURS/restored" "$WORK/backup.dump"
"$BIN" upgrade check --database-url "postgresql://$OURS/restored" >"$WORK/restored-check.txt" \
    || { cat "$WORK/restored-check.txt" >&2; fail "upgrade check on the restored database"; }
"$BIN" audit --database-url "postgresql://$OURS/restored" >"$WORK/restored-audit.txt" \
    || { cat "$WORK/restored-audit.txt" >&2; fail "audit of the restored database"; }
RESTORED_PORT=$(free_port)
DATABASE_URL="postgresql://$OURS/restored" RUST_LOG=warn "$BIN" serve --bind "127.0.0.1:$RESTORED_PORT" \
    --migrate false >"$WORK/restored.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$RESTORED_PORT/" "${PIDS[-1]}" "$WORK/restored.log"
python3 "$HERE/import_check.py" compare "http://127.0.0.1:$OLD_PORT" "http://127.0.0.1:$RESTORED_PORT" \
    || fail "the restored backup answers differently"

# --- 4. incomplete consumers ---------------------------------------------------------------
agree() {  # LABEL RC CONF URL: placement-status and ours on one database
    python3 "$HERE/upgrade_check_agrees.py" "$1" "$2" \
        -- "$VENV/bin/placement-status" --config-file "$3" upgrade check \
        -- "$BIN" upgrade check --database-url "$4" || fail "upgrade check: $1"
}
echo "==> upgrade check against placement-status's, on the same databases"
agree "Placement on PostgreSQL, healthy" 0 "$WORK/placement.conf" "postgresql://$PG/legacy"
echo "==> allocations without a consumer row (data from before 1.8)"
VOL=$(q legacy "SELECT consumer_id FROM allocations a WHERE NOT EXISTS (SELECT 1 FROM allocations b WHERE b.consumer_id = a.consumer_id AND b.resource_provider_id <> a.resource_provider_id) ORDER BY id DESC LIMIT 1")
q legacy "DELETE FROM consumers WHERE uuid = '$VOL'" >/dev/null
"$BIN" import --from "postgresql://$PG/legacy" --database-url "postgresql://$OURS/ours2" \
    --incomplete-consumer-project-id legacy-project --incomplete-consumer-user-id legacy-user | tee "$WORK/inc.txt"
grep -qE "incomplete consumers \(made\): 1$" "$WORK/inc.txt" || fail "the incomplete consumer was not made"
owner=$(q ours2 "SELECT p.external_id || '/' || u.external_id || '/' || c.generation FROM consumers c
                 JOIN projects p ON p.id = c.project_id JOIN users u ON u.id = c.user_id WHERE c.uuid = '$VOL'")
[ "$owner" = "legacy-project/legacy-user/0" ] || fail "incomplete consumer $VOL: $owner"
agree "Placement on PostgreSQL, a consumer row missing" 1 "$WORK/placement.conf" "postgresql://$PG/legacy"
# The import made the row, as placement-manage's online migration would:
# nothing is incomplete any more (issue 66: ours warned here).
"$BIN" upgrade check --database-url "postgresql://$OURS/ours2" >"$WORK/ours2-check.txt" \
    || { cat "$WORK/ours2-check.txt" >&2; fail "upgrade check after importing an incomplete consumer"; }
ROOTLESS=$(q legacy "SELECT id FROM resource_providers WHERE parent_provider_id IS NULL ORDER BY id LIMIT 1")
q legacy "UPDATE resource_providers SET root_provider_id = NULL WHERE id = $ROOTLESS" >/dev/null
agree "Placement on PostgreSQL, a root provider id missing" 2 "$WORK/placement.conf" "postgresql://$PG/legacy"
q legacy "UPDATE resource_providers SET root_provider_id = id WHERE id = $ROOTLESS" >/dev/null

# --- 6. the same from MariaDB, as most deployment tools keep Placement ------------------
echo "==> openstack-placement 16.0.0 on MariaDB (PyMySQL)"
MY=$WORK/mariadb
# MariaDB offers TLS with a certificate for another name than the address
# the import connects to (signed by a CA of the test's own), as a
# certificate for any public name would chain to the system bundle.
mkdir -p "$MY"
(cd "$MY" && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 \
        -subj /CN=import-check-ca 2>/dev/null \
    && openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr \
        -subj /CN=db.other.example 2>/dev/null \
    && printf 'subjectAltName=DNS:db.other.example\n' >san.ext \
    && openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
        -out server.pem -days 1 -extfile san.ext 2>/dev/null) || fail "openssl"
[ "$(id -u)" = 0 ] && chown mysql: "$MY"/server.key "$MY"/server.pem
start_mariadb "$MY" --ssl-cert="$MY/server.pem" --ssl-key="$MY/server.key" \
    || fail "MariaDB did not start"
mariadb --no-defaults -S "$MY_SOCK" -e "
    CREATE DATABASE placement CHARACTER SET utf8;
    CREATE USER 'placement'@'127.0.0.1' IDENTIFIED BY 'my-pw\$x';
    GRANT ALL ON placement.* TO 'placement'@'127.0.0.1';"
# The connection as kolla-ansible writes it (its charset, a password
# with a $ written $$ for oslo.config).
MY_URL="mysql+pymysql://placement:my-pw\$x@127.0.0.1:$MY_PORT/placement?charset=utf8"
cat >"$WORK/mysql.conf" <<CONF
[placement_database]
connection = mysql+pymysql://placement:my-pw\$\$x@127.0.0.1:$MY_PORT/placement?charset=utf8
[api]
auth_strategy = noauth2
CONF
mkdir -p "$WORK/mysql-conf" && cp "$WORK/mysql.conf" "$WORK/mysql-conf/placement.conf"
"$VENV/bin/placement-manage" --config-file "$WORK/mysql.conf" db sync >"$WORK/mysql-sync.log" 2>&1 \
    || { cat "$WORK/mysql-sync.log" >&2; fail "placement-manage db sync on MariaDB"; }
MY_OLD_PORT=$(free_port)
OS_PLACEMENT_CONFIG_DIR=$WORK/mysql-conf "$VENV/bin/gunicorn" --chdir "$WORK" --bind "127.0.0.1:$MY_OLD_PORT" \
    --workers 1 pl_app:application >"$WORK/placement-mysql.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$MY_OLD_PORT/" "${PIDS[-1]}" "$WORK/placement-mysql.log"
"$VENV/bin/python" "$HERE/import_check.py" populate "http://127.0.0.1:$MY_OLD_PORT"
agree "Placement on MariaDB, healthy" 0 "$WORK/mysql.conf" "$MY_URL"
"$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres -O placement ours3
step "credentials in a my.cnf (TripleO's read_default_file), --dry-run"
cat >"$WORK/my.cnf" <<CNF
[client]
user = placement
password = "my-pw\$x"
host = 127.0.0.1
port = $MY_PORT
CNF
chmod 600 "$WORK/my.cnf"
"$BIN" import --from "mysql+pymysql:///placement?charset=utf8&read_default_file=$WORK/my.cnf" \
    --database-url "postgresql://$OURS/ours3" --dry-run >"$WORK/my-dry.txt"
grep -q "no data was written" "$WORK/my-dry.txt" || fail "dry run from MariaDB: $(cat "$WORK/my-dry.txt")"
step "TLS: a CA checks the server's name, as PyMySQL does (issue 64)"
TLS_URL="mysql+pymysql://placement:my-pw\$x@127.0.0.1:$MY_PORT/placement?charset=utf8&ssl_ca=$MY/ca.pem"
if OUT=$("$BIN" import --from "$TLS_URL" --database-url "postgresql://$OURS/ours3" --dry-run 2>&1); then
    fail "the import accepted a certificate for db.other.example at 127.0.0.1: $OUT"
fi
grep -qi "certificate" <<<"$OUT" || fail "unclear TLS refusal: $OUT"
# Placement's own driver refuses the same server the same way.
if "$VENV/bin/python" -c "import pymysql, sys
pymysql.connect(host='127.0.0.1', port=$MY_PORT, user='placement', password=sys.argv[1],
                database='placement', ssl={'ca': sys.argv[2]})" 'my-pw$x' "$MY/ca.pem" 2>"$WORK/pymysql-tls.txt"; then
    fail "PyMySQL accepted the certificate for another name: the check above proves nothing"
fi
grep -qi "mismatch\|certificate" "$WORK/pymysql-tls.txt" || fail "PyMySQL: $(tail -2 "$WORK/pymysql-tls.txt")"
step "TLS: ssl_verify_identity=false checks the chain only"
"$BIN" import --from "$TLS_URL&ssl_verify_identity=false" --database-url "postgresql://$OURS/ours3" \
    --dry-run >"$WORK/my-tls-dry.txt" || fail "chain-only TLS: $(cat "$WORK/my-tls-dry.txt")"
grep -q "no data was written" "$WORK/my-tls-dry.txt" || fail "chain-only TLS dry run: $(cat "$WORK/my-tls-dry.txt")"
step "the import from MariaDB, the URL as kolla-ansible writes it"
start_ns=$(date +%s%N)
PLACEMENT_IMPORT_FROM="$MY_URL" DATABASE_URL="postgresql://$OURS/ours3" "$BIN" import | tee "$WORK/my-import.txt"
echo "    (took $(( ($(date +%s%N) - start_ns) / 1000000 )) ms)"
MY_NEW_PORT=$(free_port)
DATABASE_URL="postgresql://$OURS/ours3" RUST_LOG=warn "$BIN" serve --bind "127.0.0.1:$MY_NEW_PORT" \
    >"$WORK/ours3.log" 2>&1 &
PIDS+=($!)
wait_for "http://127.0.0.1:$MY_NEW_PORT/" "${PIDS[-1]}" "$WORK/ours3.log"
echo "==> every GET, Placement on MariaDB against ours"
python3 "$HERE/import_check.py" compare "http://127.0.0.1:$MY_OLD_PORT" "http://127.0.0.1:$MY_NEW_PORT" --in-order \
    || fail "the service imported from MariaDB answers differently"
"$BIN" upgrade check --database-url "postgresql://$OURS/ours3" >"$WORK/ours3-check.txt" \
    || { cat "$WORK/ours3-check.txt" >&2; fail "upgrade check after the import from MariaDB"; }
mariadb --no-defaults -S "$MY_SOCK" placement -e "
    DELETE FROM consumers WHERE uuid = (SELECT consumer_id FROM allocations ORDER BY id DESC LIMIT 1)"
agree "Placement on MariaDB, a consumer row missing" 1 "$WORK/mysql.conf" "$MY_URL"
echo "import check: passed (from PostgreSQL and from MariaDB)"
