#!/usr/bin/env bash
# Runs the service behind a real Keystone and drives it with the real
# openstack CLI, as a cloud would; stops at the first failure.
#
#   bash scripts/keystone_check.sh [BINARY]   (default: target/release/placement)
#   bash scripts/keystone_check.sh --bench    also: W1 candidates p50, keystone vs noauth2
#
# 1. Keystone from PyPI (cached venv) on SQLite under gunicorn on loopback;
#    admin, a service user `placement`, a project `demo` with a member
#    (alice) and a reader (bob); the placement service and its endpoint in
#    the catalog.
# 2. Our server with --auth-strategy keystone, on its own PostgreSQL.
# 3. The openstack CLI with password auth, the endpoint found through the
#    catalog: the admin writes, the member is refused, the reader sees its
#    project's usages; a revoked token is refused once the token cache
#    (5 s here) lets go of it.
# 4. Keystone stopped: a token not seen before gets 503; Keystone back: 200.
# 5. Forged identity headers change nothing; a refused token is asked
#    about once, not on every request (Keystone's access log counts).
#    The node agent signs in with nova-compute's [placement] section and
#    publishes its tree through the catalog's endpoint.
# 6. schemathesis on the whole OpenAPI document with an admin's token
#    (scripts/schemathesis_check.sh): behind Keystone, so that its check
#    that a bad token is refused holds.
#
# Venvs (created once): ${KEYSTONE_VENV:-~/.cache/placement-keystone/venv}
# and the openstack CLI's ${OSC_VENV:-~/.cache/placement-osc/venv}.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
BENCH=""
if [ "${1:-}" = "--bench" ]; then BENCH=1; shift; fi
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin keystone_check "${1:-}") || exit 2
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}

# --- the venvs ------------------------------------------------------------------------
KVENV=${KEYSTONE_VENV:-$CACHE/placement-keystone/venv}
ensure_venv "$KVENV" "keystone, gunicorn" keystone gunicorn
OVENV=${OSC_VENV:-$CACHE/placement-osc/venv}
ensure_venv "$OVENV" "osc_placement, openstackclient" python-openstackclient osc-placement

# --- processes and clean-up -------------------------------------------------------------
WORK=$(mktemp -d /tmp/keystone-check.XXXXXX)
chmod 755 "$WORK"
KS_PID=""
SERVER_PID=""
cleanup() { stop "$SERVER_PID"; stop "$KS_PID"; rm -rf "$WORK"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() { echo "FAILED: $*" >&2; echo "server log (last lines):" >&2; tail -n 20 "$WORK/server.log" >&2 || true; exit 1; }

# --- 1. Keystone --------------------------------------------------------------------------
KS_PORT=$(free_port)
KS=http://127.0.0.1:$KS_PORT
cat >"$WORK/keystone.conf" <<CONF
[DEFAULT]
log_file = $WORK/keystone.log
[database]
connection = sqlite:///$WORK/keystone.db
[token]
provider = fernet
expiration = 3600
[fernet_tokens]
key_repository = $WORK/fernet-keys
[credential]
key_repository = $WORK/credential-keys
CONF
cat >"$WORK/ks_app.py" <<'PY'
import sys; sys.argv = sys.argv[:1]
from keystone.wsgi.api import application  # noqa
PY
KM="$KVENV/bin/keystone-manage --config-file $WORK/keystone.conf"
echo "==> bootstrapping Keystone on $KS"
$KM db_sync >/dev/null 2>&1
$KM fernet_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)" >/dev/null 2>&1
$KM credential_setup --keystone-user "$(id -un)" --keystone-group "$(id -gn)" >/dev/null 2>&1
ls "$WORK/fernet-keys/0" >/dev/null || fail "fernet keys not in $WORK/fernet-keys"
$KM bootstrap --bootstrap-password secret \
    --bootstrap-admin-url "$KS/v3" --bootstrap-public-url "$KS/v3" \
    --bootstrap-internal-url "$KS/v3" --bootstrap-region-id RegionOne >/dev/null 2>&1
start_keystone() {
    OS_KEYSTONE_CONFIG_DIR=$WORK "$KVENV/bin/gunicorn" --chdir "$WORK" --bind "127.0.0.1:$KS_PORT" \
        --workers 1 --access-logfile "$WORK/access.log" ks_app:application >>"$WORK/gunicorn.log" 2>&1 &
    KS_PID=$!
    wait_for "$KS/v3" "$KS_PID" "$WORK/gunicorn.log"
}
start_keystone

os_admin() {
    env OS_AUTH_URL="$KS/v3" OS_IDENTITY_API_VERSION=3 OS_USERNAME=admin OS_PASSWORD=secret \
        OS_PROJECT_NAME=admin OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default \
        OS_REGION_NAME=RegionOne "$OVENV/bin/openstack" "$@"
}
echo "==> users, projects, roles, the placement service and its endpoint"
PL_PORT=$(free_port)
PL=http://127.0.0.1:$PL_PORT
os_admin project create --domain default service >/dev/null
os_admin project create --domain default demo >/dev/null
os_admin project create --domain default other >/dev/null
os_admin role show service >/dev/null 2>&1 || os_admin role create service >/dev/null
for u in placement:placement-secret alice:alice-secret bob:bob-secret; do
    os_admin user create --domain default --password "${u#*:}" "${u%%:*}" >/dev/null
done
os_admin role add --project service --user placement service
os_admin role add --project demo --user alice member
os_admin role add --project demo --user bob reader
os_admin service create --name placement placement >/dev/null
os_admin endpoint create --region RegionOne placement public "$PL" >/dev/null
DEMO=$(os_admin project show demo -f value -c id)
OTHER=$(os_admin project show other -f value -c id)

# --- 2. our server --------------------------------------------------------------------------
start_server() {  # extra flags...
    # Always its own PostgreSQL: DATABASE_URL is for the benchmark only.
    env -u DATABASE_URL PLACEMENT_DATA_DIR="$WORK/data" \
        PLACEMENT_KEYSTONE_PASSWORD=placement-secret RUST_LOG=${RUST_LOG:-warn} "$BIN" serve \
        --bind "127.0.0.1:$PL_PORT" --auth-strategy keystone --keystone-url "$KS/v3" \
        --keystone-username placement --keystone-project service \
        --keystone-token-cache-seconds 5 "$@" >>"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    wait_for "$PL/" "$SERVER_PID" "$WORK/server.log"
}
echo "==> starting $BIN on $PL with --auth-strategy keystone"
start_server
grep -q placement-secret "$WORK/server.log" && fail "the service password is in the log"

# --- 3. the openstack CLI -------------------------------------------------------------------
STEP=0
OUT=""
as() {  # user password project -- openstack args...
    local user=$1 pass=$2 project=$3; shift 3
    env OS_AUTH_URL="$KS/v3" OS_IDENTITY_API_VERSION=3 OS_USERNAME="$user" OS_PASSWORD="$pass" \
        OS_PROJECT_NAME="$project" OS_USER_DOMAIN_NAME=Default OS_PROJECT_DOMAIN_NAME=Default \
        OS_REGION_NAME=RegionOne OS_INTERFACE=public OS_PLACEMENT_API_VERSION=1.39 \
        "$OVENV/bin/openstack" "$@"
}
step() { STEP=$((STEP + 1)); printf '%2d. %s\n' "$STEP" "$1"; }
ok() {  # what, user pass project, args...
    local what=$1; shift; step "$what"
    OUT=$(as "$@" 2>&1) || fail "step $STEP ($what): $OUT"
}
refused() {  # what, user pass project, args...: must fail with a 403
    local what=$1; shift; step "$what"
    if OUT=$(as "$@" 2>&1); then fail "step $STEP ($what) was allowed: $OUT"; fi
    grep -q "Policy does not allow" <<<"$OUT" || fail "step $STEP ($what): not a policy refusal: $OUT"
}
want() { grep -qE -- "$1" <<<"$OUT" || fail "after step $STEP: output lacks /$1/: $OUT"; }

ADMIN=(admin secret admin)
ok "admin creates a provider" "${ADMIN[@]}" resource provider create "ks-node-$$" -f value -c uuid
RP=$OUT
[[ $RP =~ ^[0-9a-f-]{36}$ ]] || fail "not a uuid: $RP"
ok "admin sets inventory" "${ADMIN[@]}" resource provider inventory set "$RP" --resource VCPU=16 --resource MEMORY_MB=32768
CONSUMER=$(python3 -c 'import uuid; print(uuid.uuid4())')
ok "admin allocates for the demo project" "${ADMIN[@]}" resource provider allocation set "$CONSUMER" \
    --allocation "rp=$RP,VCPU=2" --allocation "rp=$RP,MEMORY_MB=2048" \
    --project-id "$DEMO" --user-id demo-user --consumer-type INSTANCE
ok "admin lists providers" "${ADMIN[@]}" resource provider list -f value -c uuid
want "^$RP$"
refused "a member may not list providers" alice alice-secret demo resource provider list
refused "a member may not create providers" alice alice-secret demo resource provider create ks-nope
refused "a reader may not write inventory" bob bob-secret demo resource provider inventory set "$RP" --resource VCPU=1
ok "the reader sees its project's usages" bob bob-secret demo resource usage show "$DEMO" -f value
want "'VCPU': 2"; want "'MEMORY_MB': 2048"
refused "the reader may not see another project's usages" bob bob-secret demo resource usage show "$OTHER"

# --- revocation and forged headers, with raw tokens --------------------------------------------
token() { as "$@" token issue -f value -c id; }
code() {  # token path [curl args...]: the HTTP status
    local t=$1 path=$2; shift 2
    curl -s -o "$WORK/body" -w '%{http_code}' -H "x-auth-token: $t" \
        -H "openstack-api-version: placement 1.39" "$@" "$PL$path"
}
step "a revoked token is refused once the cache lets go of it"
T=$(token "${ADMIN[@]}")
[ "$(code "$T" /resource_providers)" = 200 ] || fail "fresh admin token: $(cat "$WORK/body")"
as "${ADMIN[@]}" token revoke "$T"
sleep 6
[ "$(code "$T" /resource_providers)" = 401 ] || fail "revoked token after the cache window: $(cat "$WORK/body")"

step "forged identity headers change nothing"
B=$(token bob bob-secret demo)
ADMIN_PROJECT=$(os_admin project show admin -f value -c id)
for forged in "x-roles: admin" "x-project-id: $ADMIN_PROJECT" "x-user-id: admin" \
              "openstack-system-scope: all" "x-identity-status: Confirmed"; do
    s=$(code "$B" /resource_providers -H "$forged" -H "x-roles: admin,service")
    [ "$s" = 403 ] || fail "bob with '$forged' got $s: $(cat "$WORK/body")"
done
[ "$(code "$B" "/usages?project_id=$DEMO" -H "x-project-id: $OTHER")" = 200 ] || fail "bob's own usages"
[ "$(code "$B" "/usages?project_id=$OTHER" -H "x-project-id: $OTHER")" = 403 ] || fail "bob faked his project"
[ "$(code "not-a-token" /resource_providers)" = 401 ] || fail "a made-up token"

step "the node agent signs in with nova-compute's [placement] section and finds the service in the catalog"
cat >"$WORK/agent.conf" <<CONF
[placement]
auth_type = password
auth_url = $KS
username = placement
password = placement-secret
project_name = service
user_domain_name = Default
project_domain_name = Default
region_name = RegionOne
valid_interfaces = internal,public
CONF
SEED=tests/data/agent/seed-node
env -u PLACEMENT_URL -u PLACEMENT_TOKEN RUST_LOG=info "$BIN" agent --once --config-file "$WORK/agent.conf" \
    --provider-name "ks-seed-$$" --sysfs-root "$SEED/sys" --procfs-root "$SEED/proc" >"$WORK/agent.log" 2>&1 \
    || { cat "$WORK/agent.log" >&2; fail "the agent behind Keystone"; }
grep -q "Keystone token issued" "$WORK/agent.log" || fail "the agent did not sign in: $(cat "$WORK/agent.log")"
grep -q placement-secret "$WORK/agent.log" && fail "the agent's password is in its log"
A=$(token "${ADMIN[@]}")
providers() { python3 -c 'import json,sys; print(" ".join(p["uuid"] for p in json.load(open(sys.argv[1]))["resource_providers"]))' "$WORK/body"; }
[ "$(code "$A" "/resource_providers?name=ks-seed-$$")" = 200 ] || fail "the agent's node: $(cat "$WORK/body")"
NODE=$(providers)
[ -n "$NODE" ] || fail "the agent made no node"
[ "$(code "$A" "/resource_providers?in_tree=$NODE")" = 200 ] || fail "the agent's tree: $(cat "$WORK/body")"
n=$(providers | wc -w)
[ "$n" = 5 ] || fail "the agent's tree has $n providers, not 5: $(cat "$WORK/body")"
sed 's/^password = .*/password = wrong/' "$WORK/agent.conf" >"$WORK/agent-bad.conf"
if env -u PLACEMENT_URL -u PLACEMENT_TOKEN "$BIN" agent --once --config-file "$WORK/agent-bad.conf" \
    --provider-name "ks-bad-$$" --sysfs-root "$SEED/sys" --procfs-root "$SEED/proc" >"$WORK/agent-bad.log" 2>&1; then
    fail "the agent went on with a wrong password"
fi
grep -q "Keystone answered 401 for user placement" "$WORK/agent-bad.log" || fail "a wrong password: $(cat "$WORK/agent-bad.log")"
grep -q wrong "$WORK/agent-bad.log" && fail "the wrong password is in the agent's error"

step "a refused token is not sent to Keystone again"
validations() { grep -c 'GET /v3/auth/tokens' "$WORK/access.log" || true; }
# Keystone's access log line is written after its answer has gone out, so
# on a loaded machine the previous step's validation can land late: the
# count is read once it has stood still for a second (30 s at most).
settled_validations() {
    local n m
    n=$(validations)
    for _ in $(seq 30); do
        sleep 1
        m=$(validations)
        [ "$m" = "$n" ] && break
        n=$m
    done
    echo "$n"
}
BAD="gAAAAABmade-up-$$"
before=$(settled_validations)
for _ in $(seq 20); do
    [ "$(code "$BAD" /resource_providers)" = 401 ] || fail "a made-up token: $(cat "$WORK/body")"
done
asked=$(( $(settled_validations) - before ))
[ "$asked" = 1 ] || fail "20 requests with one refused token asked Keystone $asked times"
grep -q 'Keystone uri=' <(curl -s -D - -o /dev/null "$PL/resource_providers") || fail "no WWW-Authenticate"

# --- 4. Keystone stopped and back -------------------------------------------------------------
step "with Keystone stopped a new token gets 503, and 200 once it is back"
NEW=$(token "${ADMIN[@]}")
stop "$KS_PID"; KS_PID=""
s=$(code "$NEW" /resource_providers)
[ "$s" = 503 ] || fail "token while Keystone is down: $s $(cat "$WORK/body")"
grep -q placement.identity.unavailable "$WORK/body" || fail "503 body: $(cat "$WORK/body")"
[ "$(code "" /)" = 200 ] || fail "GET / while Keystone is down"
start_keystone
[ "$(code "$NEW" /resource_providers)" = 200 ] || fail "after Keystone came back: $(cat "$WORK/body")"

step "schemathesis on the whole OpenAPI document, with an admin's token"
PLACEMENT_TOKEN=$(token "${ADMIN[@]}") bash scripts/schemathesis_check.sh "$PL" >"$WORK/schemathesis.log" 2>&1 \
    || { cat "$WORK/schemathesis.log" >&2; fail "schemathesis"; }
FUZZ=$(grep '^schemathesis: ' "$WORK/schemathesis.log")

echo "keystone check: all $STEP steps passed ($FUZZ)"

# --- the benchmark (--bench) -----------------------------------------------------------------
if [ -n "$BENCH" ]; then
    [ -n "${DATABASE_URL:-}" ] || { echo "keystone_check --bench needs DATABASE_URL" >&2; exit 2; }
    echo "==> W1 candidates: keystone (cached token) vs noauth2"
    BENCH_ONLY=w1 BENCH_W1_SIZES=${BENCH_W1_SIZES:-10000} \
        BENCH_KEYSTONE_URL="$KS/v3" BENCH_KEYSTONE_SERVICE_PASSWORD=placement-secret \
        BENCH_KEYSTONE_ADMIN_PASSWORD=secret cargo bench --bench candidates
fi
