#!/usr/bin/env bash
# osc-placement's own functional suite (4.9.1, its 160 tests unchanged),
# each test against a fresh server of ours on a fresh database, as its
# `tox -e functional` runs each against a fresh in-RAM Placement:
#
#   bash scripts/osc_functional.sh [BINARY]   (default: target/release/placement)
#
# Needs DATABASE_URL (a role that may CREATE DATABASE; scripts/test.sh gives
# one). The suite and its fixtures' packages go into a cached venv:
#   ${OSC_FUNCTIONAL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/placement-osc-functional/venv}
# Two shards run side by side; prints "osc-placement functional: N passed,
# M failed".
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin osc_functional "${1:-}") || exit 2
[ -n "${DATABASE_URL:-}" ] || { echo "osc_functional: DATABASE_URL is not set" >&2; exit 2; }

VENV=${OSC_FUNCTIONAL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/placement-osc-functional/venv}
# The suite imports Placement's own fixtures module (whose PlacementFixture
# is replaced) and its log capture, so openstack-placement is installed
# beside the client; wsgi-intercept and oslotest are its test requirements.
ensure_venv "$VENV" "osc_placement.tests.functional.base, oslotest, wsgi_intercept" \
    'osc-placement==4.9.1' 'python-openstackclient==10.5.0' 'openstack-placement==16.0.0' \
    oslotest wsgi-intercept

PSQL=$(command -v psql || ls /usr/lib/postgresql/*/bin/psql 2>/dev/null | sort -V | tail -1)
[ -n "$PSQL" ] || { echo "osc_functional: psql is not installed" >&2; exit 2; }

WORK=$(mktemp -d /tmp/osc-functional.XXXXXX)
TEMPLATE=osc_template_$$
cleanup() {
    "$PSQL" "$DATABASE_URL" -q -c "DROP DATABASE IF EXISTS \"$TEMPLATE\"" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$PSQL" "$DATABASE_URL" -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE \"$TEMPLATE\""
TEMPLATE_URL=$(python3 -c 'import sys, urllib.parse as u; p = u.urlsplit(sys.argv[1]); print(u.urlunsplit(p._replace(path="/" + sys.argv[2])))' \
    "$DATABASE_URL" "$TEMPLATE")
RUST_LOG=warn "$BIN" db sync --database-url "$TEMPLATE_URL" >"$WORK/sync.log" 2>&1 \
    || { cat "$WORK/sync.log" >&2; exit 1; }

# The venv first on PATH, as tox puts it: one test runs `openstack --help`.
export PATH=$VENV/bin:$PATH PLACEMENT_BIN=$BIN OSC_TEMPLATE_DB=$TEMPLATE PSQL OSC_WORK=$WORK
pids=()
for shard in 0 1; do
    "$VENV/bin/python" scripts/osc_functional.py "$shard" 2 >"$WORK/shard$shard.out" 2>&1 &
    pids+=($!)
done
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
passed=0 failed=0
for shard in 0 1; do
    line=$(grep -E "^shard $shard: " "$WORK/shard$shard.out" || true)
    if [ -z "$line" ]; then
        tail -n 40 "$WORK/shard$shard.out" >&2
        echo "osc_functional: shard $shard did not finish" >&2
        status=1
        continue
    fi
    passed=$((passed + $(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")))
    failed=$((failed + $(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")))
    if ! grep -q " 0 failed" <<<"$line"; then
        # unittest's own report of each failure, and the servers' logs.
        sed -n '/^=\{10,\}$/,$p' "$WORK/shard$shard.out" | head -n 200 >&2
    fi
done
echo "osc-placement functional: $passed passed, $failed failed"
[ "$status" = 0 ] && [ "$failed" = 0 ] && [ "$passed" -gt 0 ]
