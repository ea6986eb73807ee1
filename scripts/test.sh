#!/usr/bin/env bash
# Runs every test of the project, from the repository alone:
#   1. cargo test on every target (unit tests, HTTP tests against PostgreSQL,
#      multi-process tests, property tests, the dashboard in a real browser,
#      the Eru and fairness vectors of tests/vectors/; the benches are built
#      and run as smoke runs without DATABASE_URL, `cargo bench` measures),
#      then the node agent on this machine's real cgroups (root and cgroup
#      v1's controllers; the summary says plainly where it could not run);
#   2. a release build and OpenStack Placement's own gabbi suites against it
#      (the gabbits of the openstack-placement 16.0.0 package, run by
#      scripts/conformance/run.sh): the main suite, the secure-RBAC, open
#      policy and CORS files in their server configurations, and the main
#      suite again behind PgBouncer in transaction mode;
#   3. scripts/osc_check.sh with the real openstack CLI,
#      scripts/osc_functional.sh: osc-placement's own functional tests,
#      scripts/keystone_check.sh: the service behind a real Keystone, and
#      schemathesis on the whole OpenAPI document there,
#      scripts/import_check.sh: a real Placement's database imported and
#      served identically, scripts/oslo_check.sh: oslo.config itself reads
#      the deployment tools' files as recorded for the Rust tests,
#      scripts/packaging_check.sh: the systemd unit verifies and is hardened,
#      the Debian package passes lintian, installs, runs and purges,
#      scripts/kolla_check.sh: kolla-ansible's rendered files through
#      kolla's own start flow with the kolla image's layout,
#      scripts/docs_check.sh: every shell example of the
#      README and docs/ against a fresh server, and
#      scripts/container_check.py: the Dockerfile's build stage on exactly
#      the files it copies.
#
# Every suite runs, and the command fails when any suite fails or could not
# run; the summary prints each suite's counts. What the suites need is
# installed here when run as root (Debian's packages; Python tools into
# cached venvs under ~/.cache), or named when it is missing.
#
# Without DATABASE_URL a throwaway PostgreSQL cluster is started from the
# system install (/usr/lib/postgresql/*/bin) and removed on exit; as root the
# server runs as the `postgres` user. The suites then connect as a plain role
# (`placement`, CREATEDB but no superuser), as a deployment's service does.
#
# Environment:
#   DATABASE_URL   use this server instead (its role needs CREATEDB)
#   SKIP=LIST      leave out suites by name (comma-separated: cargo, cgroups,
#                  conformance, pgbouncer, osc, osc-functional, keystone, import, oslo,
#                  packaging, kolla, docs, container); the summary then says NOT A FULL RUN
# Extra arguments narrow the main conformance pass (run_gabbits.py options,
# e.g. --only 'allocations*' -v) and leave out the other conformance passes.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$(pwd)
STARTED=$SECONDS
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}

say() { printf '\n==> [%ss] %s\n' "$((SECONDS - STARTED))" "$*"; }

# --- what the suites need ---------------------------------------------------------
# need PACKAGE CHECK...: installs Debian's PACKAGE (as root) unless the
# command CHECK succeeds, or stops naming the package.
APT_UPDATED=""
need() {
    local package=$1
    shift
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ "$(id -u)" != 0 ]; then
        echo "scripts/test.sh: missing: apt-get install $package" >&2
        exit 1
    fi
    say "installing $package"
    [ -n "$APT_UPDATED" ] || { apt-get update -qq; APT_UPDATED=1; }
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
}
have() { command -v "$1" || [ -x "$1" ]; }
need postgresql bash -c 'ls /usr/lib/postgresql/*/bin/initdb'
need pgbouncer bash -c 'command -v pgbouncer || [ -x /usr/sbin/pgbouncer ]'
need chromium have /usr/bin/chromium                 # the dashboard's browser test
need chromium-driver have /usr/bin/chromedriver
need apache2-utils have ab                           # the smoke run of benches/perfload.rs
need systemd have systemd-analyze                    # the systemd unit's check
need lintian have lintian                            # the Debian package's judge
need mariadb-server have /usr/sbin/mariadbd          # the import check's Placement on MariaDB
need curl have curl                                  # the checks' HTTP calls
need sudo have sudo                                  # kolla's start flow (scripts/kolla_check.sh)
need patroni have patroni                            # PostgreSQL made HA (tests/patroni.rs)
need etcd-server have etcd
need python3-etcd /usr/bin/python3 -c 'import etcd'     # Patroni's, in Debian's Python
need libfaketime bash -c 'ls /usr/lib/*/faketime/libfaketime.so.1'  # a server with a fast clock (tests/fault_bounds.rs)
need python3 have python3
need python3-venv python3 -c 'import ensurepip, venv'

# --- PostgreSQL ---------------------------------------------------------------------
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
PGTMP=""
cleanup() {
    if [ -n "$PGTMP" ]; then
        stop_postgres "$PGTMP"
        rm -rf "$PGTMP"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${DATABASE_URL:-}" ]; then
    say "starting a throwaway PostgreSQL"
    PGTMP=$(mktemp -d /tmp/pgtest.XXXXXX)
    start_postgres "$PGTMP"
    # The role every suite runs as is what deployment tools create for
    # Placement: a plain one, not a superuser. CREATEDB is the tests' own
    # need (a database per test); the service needs only to own its database.
    "$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -q -v ON_ERROR_STOP=1 \
        -c "CREATE ROLE placement LOGIN CREATEDB NOSUPERUSER" \
        -c "CREATE DATABASE app OWNER placement"
    export DATABASE_URL="postgres://placement@127.0.0.1:$PGPORT/app"
    echo "DATABASE_URL=$DATABASE_URL"
fi

# --- the suites' ledger ---------------------------------------------------------------
# One line per suite: "name<TAB>result<TAB>detail", result one of passed,
# FAILED, NOT RUN (could not run: counts as a failure) or skipped (SKIP).
LEDGER=$(mktemp /tmp/test-ledger.XXXXXX)
trap 'cleanup; rm -f "$LEDGER"' EXIT
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$LEDGER"; }
skipped() { [[ ",${SKIP:-}," == *",$1,"* ]]; }
# The closing "N passed, M failed" line of a log, or empty.
counts_of() { grep -E '^[0-9]+ passed, [0-9]+ failed' "$1" | tail -1 || true; }
# run_logged LOG COMMAND...: runs it with its output shown and kept.
run_logged() {
    local log=$1 status
    shift
    set +e
    "$@" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    return "$status"
}

# --- 1. cargo test --------------------------------------------------------------------
CARGO_LOG=$(mktemp /tmp/cargo-test.XXXXXX)
if skipped cargo; then
    record "cargo test" skipped "SKIP=cargo"
else
    say "cargo test --all-targets"
    # The HTTP tests wait on the database, not the CPU: more threads than cores.
    # Every test binary runs even when one fails, so one run shows them all.
    # The node agent's cgroup tests run in their own suite below.
    if run_logged "$CARGO_LOG" bash -c 'PLACEMENT_CGROUP_TESTS=elsewhere RUST_TEST_THREADS=${RUST_TEST_THREADS:-6} cargo test --no-fail-fast --lib --bins --tests --examples &&
            env -u DATABASE_URL cargo test --bench "*"'; then
        CARGO_RESULT=passed
    else
        CARGO_RESULT=FAILED
    fi
    read -r PASSED FAILED IGNORED < <(awk '
        /^test result:/ {
            for (i = 1; i <= NF; i++) {
                if ($(i+1) ~ /^passed/) p += $i
                if ($(i+1) ~ /^failed/) f += $i
                if ($(i+1) ~ /^ignored/) g += $i
            }
        }
        END { print p+0, f+0, g+0 }' "$CARGO_LOG")
    # Ignored are the timing probes (#[ignore = "timing probe: …"]), run by hand.
    record "cargo test" "$CARGO_RESULT" "$PASSED passed, $FAILED failed, $IGNORED ignored (timing probes)"
    # The vector sets print their own counts; a set that did not report ran no vector.
    for kind in eru fairness; do
        line=$(grep -E "^$kind vectors: " "$CARGO_LOG" | tail -1 || true)
        if [ -z "$line" ]; then
            record "$kind vectors" "NOT RUN" "no summary line in cargo test's output"
        elif [[ "$line" =~ \ 0\ failed(,\ 0\ skipped)?$ ]]; then
            record "$kind vectors" passed "${line#*: }"
        else
            record "$kind vectors" FAILED "${line#*: }"
        fi
    done
fi

# --- 1b. the node agent on real cgroups ---------------------------------------------
# tests/agent_cgroups.rs: real cgroups, real processes, the agent and a real
# server; one at a time, with their figures shown. A machine that does not
# allow them (not root, no cgroup v1 controllers) makes each test say NOT RUN
# and why, and the suite is recorded as left out, with that reason.
CGROUP_LOG=$(mktemp /tmp/agent-cgroups.XXXXXX)
if skipped cargo || skipped cgroups; then
    record "node agent on real cgroups" skipped "SKIP"
else
    say "the node agent on real cgroups"
    result=passed
    run_logged "$CGROUP_LOG" env -u PLACEMENT_CGROUP_TESTS cargo test --test agent_cgroups -- --nocapture --test-threads=1 || result=FAILED
    why=$(grep -oE 'NOT RUN: .*' "$CGROUP_LOG" | head -1 || true)
    counts=$(grep -E '^test result:' "$CGROUP_LOG" | tail -1 | sed -E 's/^test result: [a-zA-Z]+\. //; s/; 0 measured.*//' || true)
    figures=$(grep -oE 'memory eviction: killed [0-9.]+[a-zµ]+' "$CGROUP_LOG" | head -1 | sed 's/^memory eviction: //' || true)
    if [ "$result" = passed ] && [ -n "$why" ]; then
        record "node agent on real cgroups" skipped "this machine: ${why#NOT RUN: }"
    else
        record "node agent on real cgroups" "$result" "${counts:-no counts}${figures:+; $figures after the memory watermark}"
    fi
fi

# --- 2. the release build and conformance ---------------------------------------------
say "cargo build --release"
if cargo build --release; then BUILT=1; else BUILT=""; fi
CONF_LOG=$(mktemp /tmp/conformance.XXXXXX)

# conformance LABEL BINARY PASS [runner options...]
conformance() {
    local label=$1 bin=$2 pass=$3
    shift 3
    say "conformance: $label"
    local result=passed
    run_logged "$CONF_LOG" bash scripts/conformance/run.sh "$bin" "$pass" "$@" || result=FAILED
    local counts
    counts=$(counts_of "$CONF_LOG")
    [ -n "$counts" ] || { result="NOT RUN"; counts="the runner printed no counts"; }
    record "conformance: $label" "$result" "$counts"
}
if skipped conformance; then
    record "conformance" skipped "SKIP=conformance"
elif [ -z "$BUILT" ]; then
    record "conformance" "NOT RUN" "the release build failed"
else
    conformance "Placement's gabbits" target/release/placement main "$@"
    if [ $# = 0 ]; then
        conformance "secure RBAC" target/release/placement secure-rbac
        conformance "open policy file" target/release/placement open-policy
        conformance "CORS" target/release/placement cors
    else
        record "conformance: policy, secure RBAC, CORS" skipped "arguments narrowed the run"
    fi
fi
if skipped pgbouncer || skipped conformance; then
    record "conformance behind PgBouncer" skipped "SKIP"
elif [ $# != 0 ]; then
    record "conformance behind PgBouncer" skipped "arguments narrowed the run"
elif [ -z "$BUILT" ]; then
    record "conformance behind PgBouncer" "NOT RUN" "the release build failed"
else
    # The whole suite again with the server behind PgBouncer in
    # transaction pooling mode (scripts/behind_pgbouncer.sh).
    export PLACEMENT_REAL_BIN=$ROOT/target/release/placement
    conformance "behind PgBouncer" scripts/behind_pgbouncer.sh main
fi

# --- 3. the scripted end-to-end checks -------------------------------------------------
# check NAME LABEL COMMAND...: runs one check against the release build; its
# last line is its verdict.
CHECK_LOG=$(mktemp /tmp/check.XXXXXX)
check() {
    local name=$1 label=$2
    shift 2
    if skipped "$name"; then
        record "$label" skipped "SKIP=$name"
        return
    fi
    if [ -z "$BUILT" ]; then
        record "$label" "NOT RUN" "the release build failed"
        return
    fi
    say "$label"
    local result=passed
    run_logged "$CHECK_LOG" "$@" || result=FAILED
    record "$label" "$result" "$(grep -v '^\s*$' "$CHECK_LOG" | tail -1 | cut -c1-160)"
}
# The servers these start run their own PostgreSQL (zero-configuration
# mode) or databases of their own.
check osc "openstack CLI check" env -u DATABASE_URL bash scripts/osc_check.sh target/release/placement
# osc-placement's own functional tests, a database of their own per test.
check osc-functional "osc-placement functional" bash scripts/osc_functional.sh target/release/placement
check keystone "Keystone check" env -u DATABASE_URL bash scripts/keystone_check.sh target/release/placement
check import "import check" env -u DATABASE_URL bash scripts/import_check.sh target/release/placement
check oslo "oslo.config's reading" bash scripts/oslo_check.sh
check packaging "systemd unit and Debian package" bash scripts/packaging_check.sh target/release/placement
# kolla-ansible's rendered files through kolla's start flow (packaging/kolla).
check kolla "kolla image" env -u DATABASE_URL bash scripts/kolla_check.sh target/release/placement
check docs "docs examples" bash scripts/docs_check.sh target/release/placement
# Last: it builds the binary again from a copy of the sources.
check container "container build stage" python3 scripts/container_check.py
rm -f "$CARGO_LOG" "$CGROUP_LOG" "$CONF_LOG" "$CHECK_LOG"

# --- summary ------------------------------------------------------------------------------
say "summary ($((SECONDS - STARTED)) s)"
STATUS=0
FULL=1
while IFS=$'\t' read -r name result detail; do
    printf '%-40s %-8s %s\n' "$name" "$result" "$detail"
    case "$result" in
        passed) ;;
        skipped) FULL="" ;;
        *) STATUS=1 ;;
    esac
done <"$LEDGER"
[ -n "$FULL" ] || echo "NOT A FULL RUN: suites were left out (on request, or where this machine does not allow them)"
SUITES_PASSED=$(awk -F'\t' '$2 == "passed"' "$LEDGER" | wc -l)
SUITES_FAILED=$(awk -F'\t' '$2 == "FAILED" || $2 == "NOT RUN"' "$LEDGER" | wc -l)
SUITES_SKIPPED=$(awk -F'\t' '$2 == "skipped"' "$LEDGER" | wc -l)
# The closing line counts suites, not tests (each suite's own counts are above).
echo "suites: $SUITES_PASSED passed, $SUITES_FAILED failed, $SUITES_SKIPPED skipped"
exit $STATUS
