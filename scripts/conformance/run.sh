#!/usr/bin/env bash
# Runs OpenStack Placement's own gabbi tests against a server binary.
#
#   bash scripts/conformance/run.sh BINARY PASS [run_gabbits.py options...]
#
# The gabbits are Placement's own, from the openstack-placement 16.0.0
# package (placement/tests/functional/gabbits, installed with gabbi into the
# cached venv of scripts/lib.sh's placement_venv). PASS chooses which files
# run and how the server is configured, as Placement's fixtures configure it:
#
#   main          every file but the three below (Placement's APIFixture sets
#                 enforce_new_defaults = False explicitly)
#   secure-rbac   *-secure-rbac: enforce_new_defaults and enforce_scope on
#   open-policy   *-policy: every rule but admin_api opened to anyone
#                 authenticated (the policy file is written from the
#                 package's own rule list, as OpenPolicyFixture does)
#   cors          cors: the allowed origin and header of CORSFixture
#
# Every file gets a brand-new database and a freshly started server:
# BINARY serve --bind 127.0.0.1:PORT, DATABASE_URL set to a database of a
# throwaway PostgreSQL this script starts (or of DATABASE_URL's server when
# set: its role needs CREATEDB). Requests carry "x-auth-token: admin".
#
# Environment:
#   SERVER_ARGS   extra arguments for `serve` (after the pass's own)
#   KEEP_LOGS=1   keep the servers' logs (their folder is printed)
#
# The last line printed is "N passed, M failed, K skipped"; the exit status
# is the runner's (0 when nothing failed), 2 on usage errors.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
[ $# -ge 2 ] || { sed -n 2,30p "$0"; exit 2; }
# shellcheck source=scripts/lib.sh
. "$HERE/../lib.sh"
BIN=$(release_bin conformance "$1") || exit 2
PASS=$2
shift 2
VENV=$(placement_venv)
GABBITS=$("$VENV/bin/python" -c 'import os, placement; print(os.path.join(os.path.dirname(placement.__file__), "tests", "functional", "gabbits"))')
[ -d "$GABBITS" ] || { echo "conformance: no gabbits in the installed openstack-placement ($GABBITS)" >&2; exit 2; }

LOGS=$(mktemp -d /tmp/conformance-logs.XXXXXX)
chmod 755 "$LOGS"
case "$PASS" in
    main)
        SELECT=(--skip '*-policy,*-secure-rbac,cors')
        PASS_ARGS="--enforce-new-defaults false" ;;
    secure-rbac)
        SELECT=(--only '*-secure-rbac' --server-config SecureRBACPolicyFixture)
        PASS_ARGS="--enforce-new-defaults true --enforce-scope true" ;;
    open-policy)
        "$VENV/bin/python" "$HERE/open_policy.py" >"$LOGS/open-policy.yaml"
        SELECT=(--only '*-policy' --server-config OpenPolicyFixture)
        PASS_ARGS="--enforce-new-defaults false --policy-file $LOGS/open-policy.yaml" ;;
    cors)
        SELECT=(--only 'cors' --server-config CORSFixture)
        PASS_ARGS="--enforce-new-defaults false --cors-allowed-origin http://valid.example.com --cors-allow-headers openstack-api-version" ;;
    *)
        echo "conformance: unknown pass $PASS (main, secure-rbac, open-policy, cors)" >&2
        exit 2 ;;
esac

# --- PostgreSQL: DATABASE_URL's server, or a throwaway one ---------------------
PGTMP=""
cleanup() {
    [ -f "$LOGS/server.pid" ] && kill "$(cat "$LOGS/server.pid")" 2>/dev/null || true
    if [ -n "$PGTMP" ]; then
        stop_postgres "$PGTMP"
        rm -rf "$PGTMP"
    fi
    if [ -n "${KEEP_LOGS:-}" ]; then echo "server logs: $LOGS"; else rm -rf "$LOGS"; fi
}
trap cleanup EXIT
if [ -n "${DATABASE_URL:-}" ]; then
    ADMIN_URL=$DATABASE_URL
else
    PGTMP=$(mktemp -d /tmp/conformance.XXXXXX)
    start_postgres "$PGTMP" || exit 2
    ADMIN_URL=postgres://postgres@127.0.0.1:$PGPORT/postgres
fi
DB=conformance_$$_$RANDOM

PORT=$(free_port)
# --- the reset run before each file: a fresh database, a fresh server ---------
cat >"$LOGS/reset.sh" <<EOF
#!/usr/bin/env bash
set -eu
if [ -f "$LOGS/server.pid" ]; then
    pid=\$(cat "$LOGS/server.pid"); kill "\$pid" 2>/dev/null || true
    for _ in \$(seq 100); do kill -0 "\$pid" 2>/dev/null || break; sleep 0.05; done
    kill -9 "\$pid" 2>/dev/null || true
fi
URL=\$(ADMIN_URL='$ADMIN_URL' DB='$DB' "$VENV/bin/python" - <<'PY'
import os, sys, time, urllib.parse, psycopg2
admin, db = os.environ["ADMIN_URL"], os.environ["DB"]
c = psycopg2.connect(admin); c.autocommit = True
cur = c.cursor()
sys.path.insert(0, "$HERE")
from drop_database import drop_database
drop_database(cur, db)
cur.execute('CREATE DATABASE "%s"' % db)
u = urllib.parse.urlsplit(admin)
print(urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, "")))
PY
)
n=\$(ls "$LOGS" | grep -c '^server-' || true)
DATABASE_URL=\$URL "$BIN" serve --bind 127.0.0.1:$PORT $PASS_ARGS ${SERVER_ARGS:-} \
    >"$LOGS/server-\$n.log" 2>&1 </dev/null &
echo \$! >"$LOGS/server.pid"
for _ in \$(seq 600); do
    if curl -sf -o /dev/null "http://127.0.0.1:$PORT/"; then exit 0; fi
    kill -0 \$(cat "$LOGS/server.pid") 2>/dev/null || break
    sleep 0.1
done
echo "server did not answer GET / on port $PORT; its log:" >&2
tail -n 40 "$LOGS/server-\$n.log" >&2
exit 1
EOF
chmod +x "$LOGS/reset.sh"

set +e
"$VENV/bin/python" "$HERE/run_gabbits.py" --url "http://127.0.0.1:$PORT" \
    --gabbits "$GABBITS" --reset-cmd "$LOGS/reset.sh" "${SELECT[@]}" "$@"
STATUS=$?
set -e
if [ -f "$LOGS/server.pid" ]; then
    pid=$(cat "$LOGS/server.pid"); kill "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    rm -f "$LOGS/server.pid"
fi
ADMIN_URL=$ADMIN_URL DB=$DB HERE=$HERE "$VENV/bin/python" - <<'EOF' || true
import os, sys, psycopg2
sys.path.insert(0, os.environ["HERE"])
from drop_database import drop_database
c = psycopg2.connect(os.environ["ADMIN_URL"]); c.autocommit = True
drop_database(c.cursor(), os.environ["DB"])
EOF
exit $STATUS
