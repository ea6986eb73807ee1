#!/usr/bin/env bash
# schemathesis, the property-based API tester, against the whole OpenAPI
# document of a running server: every operation, every check (no 5xx,
# statuses, content types and answers as documented, schema-valid
# requests accepted, invalid ones and bad tokens refused, the stateful
# phase following the document's links), 10 examples an operation.
#
#   PLACEMENT_TOKEN=... bash scripts/schemathesis_check.sh URL
#
# The token (an admin's) is read from the environment, never from the
# command line, and reaches schemathesis through its configuration
# (scripts/schemathesis.toml, which also says which operations may answer
# Placement's 400 for a rule no schema can state). It seeds a provider
# with inventory and an allocation on it, whose ids the configuration
# hands to the operations on a provider, a class and a consumer, so that
# they are tested past a 404. scripts/keystone_check.sh runs it behind a
# real Keystone (under noauth2 any token is taken, by design, and
# schemathesis' check that bad tokens are refused fails there).
#
# Venv (created once): ${SCHEMATHESIS_VENV:-~/.cache/placement-schemathesis/venv}.
# Prints "schemathesis: N operations, M failures".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
URL=${1:?usage: PLACEMENT_TOKEN=... schemathesis_check.sh URL}
[ -n "${PLACEMENT_TOKEN:-}" ] || { echo "schemathesis_check: PLACEMENT_TOKEN is not set" >&2; exit 2; }
VENV=${SCHEMATHESIS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/placement-schemathesis/venv}
ensure_venv "$VENV" schemathesis 'schemathesis==4.32.5'

WORK=$(mktemp -d /tmp/schemathesis-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# --- the seeded data (the ids scripts/schemathesis.toml names) ---------------------------
PROVIDER=7e57da7a-0000-4000-8000-000000000001
CONSUMER=7e57da7a-0000-4000-8000-000000000002
call() {  # method path [body]: fails on any status but 2xx
    local out body=()
    [ $# -lt 3 ] || body=(-d "$3")
    out=$(curl -s -o "$WORK/seed" -w '%{http_code}' -X "$1" "$URL$2" \
        -H @<(printf 'X-Auth-Token: %s\n' "$PLACEMENT_TOKEN") \
        -H 'OpenStack-API-Version: placement 1.39' -H 'Content-Type: application/json' \
        "${body[@]}")
    [[ $out == 2* ]] || { echo "schemathesis_check: seeding $1 $2 got $out: $(cat "$WORK/seed")" >&2; exit 1; }
}
call POST /resource_providers "{\"name\": \"schemathesis-seed\", \"uuid\": \"$PROVIDER\"}"
call PUT "/resource_providers/$PROVIDER/inventories" \
    '{"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 64}, "MEMORY_MB": {"total": 262144}, "DISK_GB": {"total": 4096}}}'
call PUT "/allocations/$CONSUMER" \
    "{\"allocations\": {\"$PROVIDER\": {\"resources\": {\"VCPU\": 2, \"MEMORY_MB\": 2048}}}, \"consumer_generation\": null, \"project_id\": \"schemathesis\", \"user_id\": \"schemathesis\", \"consumer_type\": \"INSTANCE\"}"

# --- the run ------------------------------------------------------------------------------
echo "==> schemathesis against $URL/openapi.json"
status=0
(cd "$WORK" && "$VENV/bin/schemathesis" --config-file "$OLDPWD/scripts/schemathesis.toml" \
    run "$URL/openapi.json" --url "$URL" -c all --max-examples 10 --seed 1 \
    --no-color >"$WORK/out" 2>&1) || status=$?
summary=$(grep -E '^=+ .* in [0-9.]+s =+$' "$WORK/out" | tail -n 1 || true)
operations=$(sed -nE 's/^ *Tested: ([0-9]+).*/\1/p' "$WORK/out" | tail -n 1)
failures=$(sed -nE 's/.* ([0-9]+) failures?[ ,].*/\1/p' <<<"$summary")
if [ "$status" != 0 ] || [ -z "$operations" ]; then
    # Each failure's report, with its curl line (the token filtered).
    sed -n '/^=* FAILURES =*$/,/^=* SUMMARY =*$/p' "$WORK/out" | head -n 300 >&2
    tail -n 40 "$WORK/out" >&2
fi
echo "schemathesis: ${operations:-0} operations, ${failures:-0} failures"
[ "$status" = 0 ] && [ "${operations:-0}" -gt 0 ] && [ "${failures:-0}" = 0 ]
