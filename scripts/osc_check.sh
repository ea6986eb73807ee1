#!/usr/bin/env bash
# Drives the service with the real OpenStack CLI (python-openstackclient +
# osc-placement), as a new user would, and stops at the first failure.
#
#   bash scripts/osc_check.sh [BINARY]      (default: target/release/placement)
#
# The CLI is installed once into a cached venv:
#   ${OSC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/placement-osc/venv}
# The server is started on a free port: on DATABASE_URL when set, otherwise in
# its zero-configuration mode (its own PostgreSQL in a temporary data dir).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin osc_check "${1:-}") || exit 2

# --- the CLI ----------------------------------------------------------------------
VENV=${OSC_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/placement-osc/venv}
ensure_venv "$VENV" "osc_placement, openstackclient" python-openstackclient osc-placement

# --- the server ---------------------------------------------------------------------
WORK=$(mktemp -d /tmp/osc-check.XXXXXX)
chmod 755 "$WORK"
SERVER_PID=""
cleanup() {
    if [ -n "$SERVER_PID" ]; then
        kill "$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PORT=$(free_port)
URL=http://127.0.0.1:$PORT
if [ -n "${DATABASE_URL:-}" ]; then
    echo "==> starting $BIN on $URL (DATABASE_URL)"
else
    echo "==> starting $BIN on $URL (its own PostgreSQL in $WORK/data)"
    export PLACEMENT_DATA_DIR=$WORK/data
fi
RUST_LOG=${RUST_LOG:-warn} "$BIN" serve --bind "127.0.0.1:$PORT" >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 300); do
    if python3 -c "import urllib.request; urllib.request.urlopen('$URL/', timeout=1)" 2>/dev/null; then break; fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "FAILED: the server exited; its log:" >&2; cat "$WORK/server.log" >&2; exit 1
    fi
    sleep 0.1
done

# --- the checks -------------------------------------------------------------------------
osc() {
    "$VENV/bin/openstack" --os-auth-type admin_token --os-token admin \
        --os-endpoint "$URL" --os-placement-api-version "${OSC_API_VERSION:-1.39}" "$@"
}
STEP=0
OUT=""
# run DESCRIPTION CMD...: runs an openstack command, keeps its output in OUT.
run() {
    local what=$1; shift
    STEP=$((STEP + 1))
    printf '%2d. %s\n' "$STEP" "$what"
    if ! OUT=$(osc "$@" 2>&1); then
        echo "FAILED at step $STEP ($what): openstack $*" >&2
        echo "$OUT" >&2
        echo "server log (last lines):" >&2; tail -n 20 "$WORK/server.log" >&2
        exit 1
    fi
}
# want PATTERN: the last command's output must contain a line matching PATTERN.
want() {
    if ! grep -qE -- "$1" <<<"$OUT"; then
        echo "FAILED after step $STEP: output lacks /$1/:" >&2
        echo "$OUT" >&2
        exit 1
    fi
}
# refuse PATTERN: the last command's output must not match PATTERN.
refuse() {
    if grep -qE -- "$1" <<<"$OUT"; then
        echo "FAILED after step $STEP: output unexpectedly matches /$1/:" >&2
        echo "$OUT" >&2
        exit 1
    fi
}

SUFFIX=$(python3 -c 'import uuid; print(uuid.uuid4().hex[:8])')
TAG=$(tr a-z A-Z <<<"$SUFFIX")
CN=osc-cn-$SUFFIX
AGG=$(python3 -c 'import uuid; print(uuid.uuid4())')
CONSUMER=$(python3 -c 'import uuid; print(uuid.uuid4())')
TRAIT=CUSTOM_OSC_$TAG
CLASS=CUSTOM_OSC_RC_$TAG

run "resource provider create" resource provider create "$CN" -f value -c uuid
RP=$OUT
[[ $RP =~ ^[0-9a-f-]{36}$ ]] || { echo "FAILED: not a uuid: $RP" >&2; exit 1; }
run "resource provider create (child)" resource provider create "$CN-child" --parent-provider "$RP" -f value -c uuid
CHILD=$OUT
run "resource provider show (child)" resource provider show "$CHILD" -f value -c root_provider_uuid -c parent_provider_uuid
want "^$RP$"
run "resource provider list" resource provider list -f value -c name
want "^$CN$"; want "^$CN-child$"
run "resource provider list --in-tree" resource provider list --in-tree "$CHILD" -f value -c uuid
want "^$RP$"; want "^$CHILD$"
run "resource provider show" resource provider show "$RP" -f value -c name -c generation
want "^$CN$"; want "^0$"
run "resource provider set (rename)" resource provider set "$RP" --name "$CN-renamed" -f value -c name
want "^$CN-renamed$"

run "resource class create" resource class create "$CLASS"
run "resource class list" resource class list -f value -c name
want "^VCPU$"; want "^MEMORY_MB$"; want "^$CLASS$"

run "resource provider inventory set" resource provider inventory set "$RP" \
    --resource VCPU=8 --resource MEMORY_MB:total=4096 --resource MEMORY_MB:reserved=512 \
    --resource "$CLASS=2" -f value -c resource_class -c total
want "^VCPU 8$"; want "^MEMORY_MB 4096$"; want "^$CLASS 2$"
run "resource provider inventory list" resource provider inventory list "$RP" -f value -c resource_class -c total -c used
want "^VCPU 8 0$"; want "^MEMORY_MB 4096 0$"
run "resource provider inventory show" resource provider inventory show "$RP" MEMORY_MB -f value -c total -c reserved -c max_unit
want "^4096$"; want "^512$"; want "^2147483647$"

run "trait create" trait create "$TRAIT"
run "trait list" trait list -f value -c name
want "^$TRAIT$"; want "^HW_CPU_X86_AVX2$"
run "resource provider trait set" resource provider trait set "$RP" --trait "$TRAIT" --trait HW_CPU_X86_AVX2 -f value
want "^$TRAIT$"
run "resource provider trait list" resource provider trait list "$RP" -f value
want "^$TRAIT$"; want "^HW_CPU_X86_AVX2$"
run "resource provider list --required" resource provider list --required "$TRAIT" -f value -c uuid
want "^$RP$"; refuse "^$CHILD$"

run "resource provider show (generation)" resource provider show "$RP" -f value -c generation
GEN=$OUT
run "resource provider aggregate set" resource provider aggregate set "$RP" --aggregate "$AGG" --generation "$GEN" -f value -c uuid
want "^$AGG$"
run "resource provider aggregate list" resource provider aggregate list "$RP" -f value -c uuid
want "^$AGG$"
run "resource provider list --member-of" resource provider list --member-of "$AGG" -f value -c uuid
want "^$RP$"

run "resource provider allocation set" resource provider allocation set "$CONSUMER" \
    --allocation "rp=$RP,VCPU=2" --allocation "rp=$RP,MEMORY_MB=1024" \
    --project-id osc-project --user-id osc-user --consumer-type INSTANCE -f value -c resource_provider -c resources
want "^$RP "
run "resource provider allocation show" resource provider allocation show "$CONSUMER" -f json
want "\"VCPU\": 2"; want "\"MEMORY_MB\": 1024"
run "resource provider usage show" resource provider usage show "$RP" -f value -c resource_class -c usage
want "^VCPU 2$"; want "^MEMORY_MB 1024$"
run "resource usage show (project)" resource usage show osc-project -f value
want "VCPU"
run "resource provider list --resource" resource provider list --resource VCPU=6 -f value -c uuid
want "^$RP$"
run "resource provider list --resource (too much)" resource provider list --resource VCPU=7 -f value -c uuid
refuse "^$RP$"
run "resource provider allocation delete" resource provider allocation delete "$CONSUMER"

run "resource provider trait delete" resource provider trait delete "$RP"
run "trait delete" trait delete "$TRAIT"
run "resource provider inventory delete (one class)" resource provider inventory delete "$RP" --resource-class "$CLASS"
run "resource class delete" resource class delete "$CLASS"
run "resource provider delete (child)" resource provider delete "$CHILD"
run "resource provider delete" resource provider delete "$RP"
run "resource provider list (after delete)" resource provider list -f value -c uuid
refuse "^$RP$"; refuse "^$CHILD$"

echo "openstack CLI check: all $STEP steps passed"
