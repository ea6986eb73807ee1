#!/usr/bin/env bash
# packaging/systemd/placement.service is a unit systemd accepts, and
# hardened: systemd-analyze verifies it (with /usr/bin/placement pointing
# at the built binary) and rates its exposure at most 2.0 ("OK").
# docker-compose's database: packaging/compose/initdb.sh run as the
# postgres image runs it, against a real PostgreSQL, refuses the
# superuser's password for the service and makes a plain role otherwise;
# compose's file requires both passwords.
#
#   bash scripts/packaging_check.sh [BINARY]   (default: target/release/placement)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin packaging_check "${1:-}") || exit 2
command -v systemd-analyze >/dev/null || { echo "packaging check: systemd-analyze is not installed (apt-get install systemd)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/packaging-check.XXXXXX)
# The PostgreSQL below runs as `postgres` (as root): it must reach its folder.
chmod 755 "$WORK"
trap 'stop_postgres "$WORK/pg"; rm -rf "$WORK"' EXIT

sed "s|/usr/bin/placement|$BIN|g" packaging/systemd/placement.service >"$WORK/placement.service"
OUT=$(systemd-analyze verify "$WORK/placement.service" 2>&1 || true)
# Users and folders of the target machine are not this one's business.
OUT=$(grep -v -e "User=placement" -e "Group=placement" <<<"$OUT" || true)
if [ -n "$OUT" ]; then
    echo "$OUT" >&2
    echo "FAILED: systemd-analyze verify" >&2
    exit 1
fi
exposure=$(systemd-analyze security --offline=yes "$WORK/placement.service" 2>&1 | sed -n 's/.*Overall exposure level for placement.service: \([0-9.]*\).*/\1/p')
[ -n "$exposure" ] || { echo "FAILED: no exposure level from systemd-analyze security" >&2; exit 1; }
awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' || { echo "FAILED: exposure $exposure is over 2.0" >&2; exit 1; }
echo "packaging check: the systemd unit verifies; exposure $exposure"

# --- docker-compose's database: two passwords, both required ----------------------
for var in PLACEMENT_DB_PASSWORD PLACEMENT_DB_SUPERUSER_PASSWORD; do
    grep -q "\${$var:?" docker-compose.yml || { echo "FAILED: docker-compose.yml does not require $var" >&2; exit 1; }
done
grep -q 'POSTGRES_PASSWORD: ${PLACEMENT_DB_SUPERUSER_PASSWORD:?' docker-compose.yml \
    || { echo "FAILED: the superuser's password is not PLACEMENT_DB_SUPERUSER_PASSWORD" >&2; exit 1; }
mkdir -p "$WORK/pg"
start_postgres "$WORK/pg" >/dev/null
initdb_as_image() {  # POSTGRES_PASSWORD PLACEMENT_DB_PASSWORD: the script as the image runs it
    env POSTGRES_PASSWORD="$1" PLACEMENT_DB_PASSWORD="$2" PGHOST=127.0.0.1 PGPORT="$PGPORT" \
        PATH="$PGBIN:$PATH" sh packaging/compose/initdb.sh
}
if initdb_as_image same-secret same-secret >"$WORK/initdb.txt" 2>&1; then
    echo "FAILED: initdb.sh gave the service the superuser's password" >&2; exit 1
fi
grep -q "superuser's password" "$WORK/initdb.txt" || { cat "$WORK/initdb.txt" >&2; exit 1; }
if grep -q "same-secret" "$WORK/initdb.txt"; then echo "FAILED: initdb.sh echoed the password" >&2; exit 1; fi
initdb_as_image super-secret service-secret >"$WORK/initdb.txt" 2>&1 || { cat "$WORK/initdb.txt" >&2; exit 1; }
super=$("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -tAc \
    "SELECT rolsuper FROM pg_roles WHERE rolname = 'placement'")
owner=$("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -tAc \
    "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'placement'")
[ "$super" = f ] && [ "$owner" = placement ] \
    || { echo "FAILED: initdb.sh made role placement super=$super owning $owner" >&2; exit 1; }
echo "packaging check: compose's database takes two passwords; the service's role is plain"
