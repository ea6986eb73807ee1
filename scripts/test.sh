#!/usr/bin/env bash
# Runs every test of the project:
#   1. cargo test on every target (unit tests, HTTP tests against PostgreSQL,
#      the two-server concurrency test, property tests, vectors; benches as
#      smoke runs without DATABASE_URL);
#   2. a release build and OpenStack Placement's own gabbi suite against it
#      (../shared/conformance, when present), then its policy, secure-RBAC
#      and CORS files in their three server configurations, and the suite
#      again behind PgBouncer in transaction mode;
#   3. scripts/osc_check.sh with the real openstack CLI,
#      scripts/keystone_check.sh: the service behind a real Keystone, driven
#      by that CLI, and scripts/import_check.sh: a real Placement's database
#      imported and served identically (each installs its Python tools
#      once, cached).
#
# Without DATABASE_URL a throwaway PostgreSQL cluster is started from the
# system install (/usr/lib/postgresql/*/bin) and removed on exit; as root the
# server runs as the `postgres` user.
#
# Environment:
#   DATABASE_URL          use this server instead (its role needs CREATEDB)
#   CONFORMANCE_STRICT=0  report conformance failures without failing (default: fail)
#                         (default: run it, print its summary, do not fail)
#   SKIP_CONFORMANCE=1    skip step 2
#   OSC_CHECK=0           skip the openstack CLI check of step 3
#   KEYSTONE_CHECK=0      skip the Keystone check of step 3
#   IMPORT_CHECK=0        skip the import check of step 3
#   PGBOUNCER_CHECK=0     skip the conformance pass behind PgBouncer
# Extra arguments are passed to the conformance runner, e.g.
#   bash scripts/test.sh --only 'allocations*' -v
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
STARTED=$SECONDS
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

say() { printf '\n==> [%ss] %s\n' "$((SECONDS - STARTED))" "$*"; }

# --- PostgreSQL ---------------------------------------------------------------
PGTMP=""
cleanup() {
    if [ -n "$PGTMP" ]; then
        as_pg "$PGBIN/pg_ctl" -D "$PGTMP/data" -m immediate stop >/dev/null 2>&1 || true
        rm -rf "$PGTMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

if [ -z "${DATABASE_URL:-}" ]; then
    say "starting a throwaway PostgreSQL"
    ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || {
        echo "PostgreSQL is not installed: apt-get install postgresql, or set DATABASE_URL" >&2
        exit 1
    }
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    PGTMP=$(mktemp -d /tmp/pgtest.XXXXXX)
    chmod 755 "$PGTMP"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$PGTMP"; fi
    as_pg "$PGBIN/initdb" -D "$PGTMP/data" -U postgres --auth=trust -E UTF8 --no-locale --no-sync >/dev/null
    # The first port nobody listens on where PostgreSQL starts: a port
    # nobody listens on can still be taken (a client connection's own port
    # is one from the same range), and then the start fails: the next.
    PGPORT=""
    for p in $(seq 54330 54429); do
        (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
        if as_pg "$PGBIN/pg_ctl" -D "$PGTMP/data" -l "$PGTMP/log" -w -t 30 \
            -o "-p $p -k $PGTMP -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
            start >/dev/null; then
            PGPORT=$p
            break
        fi
    done
    [ -n "$PGPORT" ] || { cat "$PGTMP/log" >&2; echo "PostgreSQL started on no port in 54330-54429" >&2; exit 1; }
    "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres app
    export DATABASE_URL="postgres://postgres@127.0.0.1:$PGPORT/app"
    echo "DATABASE_URL=$DATABASE_URL"
fi

# PgBouncer, for the tests and the conformance pass through a transaction
# pooler (Debian's package; installed here when we may).
if ! command -v pgbouncer >/dev/null 2>&1 && ! [ -x /usr/sbin/pgbouncer ]; then
    if [ "$(id -u)" = 0 ]; then
        say "installing pgbouncer"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends pgbouncer >/dev/null
    else
        echo "pgbouncer is not installed: apt-get install pgbouncer" >&2
        exit 1
    fi
fi

# ab (Debian's apache2-utils), for the smoke run of benches/perfload.rs:
# Placement's own CI performance job, which drives the service with it.
if ! command -v ab >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        say "installing apache2-utils (ab)"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends apache2-utils >/dev/null
    else
        echo "ab is not installed: apt-get install apache2-utils" >&2
        exit 1
    fi
fi

# --- 1. cargo test ------------------------------------------------------------
# Every target. The benches run as smoke tests without DATABASE_URL (their
# database workloads skip themselves; `cargo bench` runs them for real).
say "cargo test --all-targets"
CARGO_LOG=$(mktemp /tmp/cargo-test.XXXXXX)
set +e
(
    set -o pipefail
    # The HTTP tests wait on the database, not the CPU: more threads than cores.
    RUST_TEST_THREADS=${RUST_TEST_THREADS:-6} cargo test --lib --bins --tests --examples &&
        env -u DATABASE_URL cargo test --bench '*'
) 2>&1 | tee "$CARGO_LOG"
CARGO_STATUS=${PIPESTATUS[0]}
set -e
read -r PASSED FAILED IGNORED < <(awk '
    /^test result:/ {
        for (i = 1; i <= NF; i++) {
            if ($(i+1) ~ /^passed/) p += $i
            if ($(i+1) ~ /^failed/) f += $i
            if ($(i+1) ~ /^ignored/) g += $i
        }
    }
    END { print p+0, f+0, g+0 }' "$CARGO_LOG")
rm -f "$CARGO_LOG"

# --- 2. conformance -------------------------------------------------------------
CONFORMANCE_STATUS=0
CONFORMANCE_SUMMARY="not run"
CONFORMANCE=$ROOT/../shared/conformance/run-against.sh
if [ "$CARGO_STATUS" = 0 ] && [ -z "${SKIP_CONFORMANCE:-}" ] && [ -f "$CONFORMANCE" ]; then
    say "cargo build --release"
    cargo build --release
    say "conformance: OpenStack Placement's gabbi tests against target/release/placement"
    CONF_LOG=$(mktemp /tmp/conformance.XXXXXX)
    set +e
    bash "$CONFORMANCE" target/release/placement "$@" 2>&1 | tee "$CONF_LOG"
    CONFORMANCE_STATUS=${PIPESTATUS[0]}
    set -e
    CONFORMANCE_SUMMARY=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$CONF_LOG" | tail -1 || true)
    [ -n "$CONFORMANCE_SUMMARY" ] || CONFORMANCE_SUMMARY="runner failed (exit $CONFORMANCE_STATUS)"
    rm -f "$CONF_LOG"
    # The policy, secure-RBAC and CORS files, each pass with the server
    # configured as Placement's fixture configures it (through the flags'
    # environment fallbacks).
    POLICY_DIR=$ROOT/../shared/conformance/gabbits-policy
    if [ -d "$POLICY_DIR" ] && [ $# = 0 ]; then
        policy_pass() {  # label fixture only env...
            local label=$1 fixture=$2 only=$3; shift 3
            say "conformance: $label"
            set +e
            env "$@" GABBITS="$POLICY_DIR" bash "$CONFORMANCE" target/release/placement \
                --only "$only" --server-config "$fixture" 2>&1 | tee "$CONF_LOG"
            local status=${PIPESTATUS[0]}
            set -e
            local summary
            summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$CONF_LOG" | tail -1 || true)
            CONFORMANCE_SUMMARY="$CONFORMANCE_SUMMARY; $label: ${summary:-runner failed (exit $status)}"
            [ "$status" = 0 ] || CONFORMANCE_STATUS=$status
            rm -f "$CONF_LOG"
        }
        policy_pass "secure RBAC" SecureRBACPolicyFixture '*-secure-rbac' \
            PLACEMENT_ENFORCE_NEW_DEFAULTS=true PLACEMENT_ENFORCE_SCOPE=true
        policy_pass "open policy file" OpenPolicyFixture '*-policy' \
            PLACEMENT_POLICY_FILE="$ROOT/../shared/conformance/open-policy.yaml"
        policy_pass "CORS" CORSFixture 'cors' \
            PLACEMENT_CORS_ALLOWED_ORIGIN=http://valid.example.com \
            PLACEMENT_CORS_ALLOW_HEADERS=openstack-api-version
    fi
    # The whole suite again with the server behind PgBouncer in
    # transaction pooling mode (scripts/behind_pgbouncer.sh).
    if [ $# = 0 ] && [ "${PGBOUNCER_CHECK:-1}" != 0 ]; then
        say "conformance: behind PgBouncer in transaction mode"
        set +e
        PLACEMENT_REAL_BIN="$ROOT/target/release/placement" \
            bash "$CONFORMANCE" scripts/behind_pgbouncer.sh 2>&1 | tee "$CONF_LOG"
        status=${PIPESTATUS[0]}
        set -e
        summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$CONF_LOG" | tail -1 || true)
        CONFORMANCE_SUMMARY="$CONFORMANCE_SUMMARY; behind PgBouncer: ${summary:-runner failed (exit $status)}"
        [ "$status" = 0 ] || CONFORMANCE_STATUS=$status
        rm -f "$CONF_LOG"
    fi
fi

# --- 3. the scripted end-to-end checks -------------------------------------------
# run_check LABEL SWITCH SCRIPT: runs scripts/SCRIPT against the release
# build unless SWITCH (OSC_CHECK, …) is 0; sets <SWITCH>_STATUS. The servers
# they start run their own PostgreSQL (zero-configuration mode).
run_check() {
    local label=$1 switch=$2 script=$3 status=0
    if [ "$CARGO_STATUS" = 0 ] && [ "${!switch:-1}" != 0 ]; then
        say "$label"
        [ -x target/release/placement ] || cargo build --release
        set +e
        env -u DATABASE_URL bash "scripts/$script" target/release/placement
        status=$?
        set -e
    fi
    printf -v "${switch%_CHECK}_STATUS" '%s' "$status"
}
run_check "openstack CLI check" OSC_CHECK osc_check.sh
run_check "Keystone check" KEYSTONE_CHECK keystone_check.sh
run_check "import check" IMPORT_CHECK import_check.sh

# --- summary --------------------------------------------------------------------
say "summary ($((SECONDS - STARTED)) s)"
echo "cargo test:   exit $CARGO_STATUS ($PASSED passed, $FAILED failed, $IGNORED ignored)"
if [ "${CONFORMANCE_STRICT:-1}" = 1 ]; then
    echo "conformance (strict): $CONFORMANCE_SUMMARY"
else
    echo "conformance (informational, CONFORMANCE_STRICT=0): $CONFORMANCE_SUMMARY"
fi
[ "${OSC_CHECK:-1}" = 0 ] || echo "openstack CLI check: exit $OSC_STATUS"
[ "${KEYSTONE_CHECK:-1}" = 0 ] || echo "Keystone check: exit $KEYSTONE_STATUS"
[ "${IMPORT_CHECK:-1}" = 0 ] || echo "import check: exit $IMPORT_STATUS"

STATUS=0
[ "$CARGO_STATUS" = 0 ] || STATUS=1
[ "$OSC_STATUS" = 0 ] || STATUS=1
[ "$KEYSTONE_STATUS" = 0 ] || STATUS=1
[ "$IMPORT_STATUS" = 0 ] || STATUS=1
if [ "${CONFORMANCE_STRICT:-1}" = 1 ] && [ "$CONFORMANCE_STATUS" != 0 ]; then STATUS=1; fi
# The closing line counts the cargo tests (ignored ones as skipped).
echo "$PASSED passed, $FAILED failed, $IGNORED skipped"
exit $STATUS
