#!/usr/bin/env bash
# packaging/systemd/placement.service is a unit systemd accepts, and
# hardened: systemd-analyze verifies it (with /usr/bin/placement pointing
# at the built binary) and rates its exposure at most 2.0 ("OK").
# docker-compose's database: packaging/compose/initdb.sh run as the
# postgres image runs it, against a real PostgreSQL, refuses the
# superuser's password for the service and makes a plain role otherwise;
# compose's file requires both passwords.
# The Debian package (packaging/deb/build.sh) installs with dpkg on this
# machine, runs as the unit says (its user, its environment file, its
# ExecStartPre and ExecStart) against a real PostgreSQL, answers, writes
# its log where the config says, stops cleanly, and purges leaving none of
# its files. Installing needs root; the check says so and fails otherwise.
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
SERVER_PID=
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null
    if [ "$(id -u)" = 0 ] && dpkg -s placement >/dev/null 2>&1 && [ -n "${INSTALLED_HERE:-}" ]; then
        dpkg --purge placement >/dev/null 2>&1 || true
    fi
    stop_postgres "$WORK/pg"
    rm -rf "$WORK"
}
trap cleanup EXIT

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
# The node agent's unit: root (it kills best-effort work and writes cgroup
# limits) with CAP_KILL alone, writable paths only the cgroup filesystems
# and its state directory.
sed "s|/usr/bin/placement|$BIN|g" packaging/systemd/placement-agent.service >"$WORK/placement-agent.service"
OUT=$(systemd-analyze verify "$WORK/placement-agent.service" 2>&1 || true)
[ -z "$OUT" ] || { echo "$OUT" >&2; echo "FAILED: systemd-analyze verify (the agent's unit)" >&2; exit 1; }
agent_exposure=$(systemd-analyze security --offline=yes "$WORK/placement-agent.service" 2>&1 | sed -n 's/.*Overall exposure level for placement-agent.service: \([0-9.]*\).*/\1/p')
[ -n "$agent_exposure" ] || { echo "FAILED: no exposure level for the agent's unit" >&2; exit 1; }
awk -v e="$agent_exposure" 'BEGIN { exit !(e <= 3.0) }' || { echo "FAILED: the agent's exposure $agent_exposure is over 3.0" >&2; exit 1; }
grep -qx 'CapabilityBoundingSet=CAP_KILL' packaging/systemd/placement-agent.service \
    || { echo "FAILED: the agent's unit keeps more than CAP_KILL" >&2; exit 1; }
echo "packaging check: the agent's unit verifies; exposure $agent_exposure"

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

# --- the Debian package: install, start as the unit says, answer, purge -------------
DEB=$(bash packaging/deb/build.sh "$BIN" "$WORK/deb")
command -v lintian >/dev/null || { echo "FAILED: lintian is not installed (apt-get install lintian)" >&2; exit 1; }
# Debian's own judge: no error and no warning (overrides say why, in the package).
lintian --fail-on error,warning --tag-display-limit 0 "$DEB" >"$WORK/lintian.txt" 2>&1 \
    || { cat "$WORK/lintian.txt" >&2; echo "FAILED: lintian" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "FAILED: installing the package needs root (run the test command as root)" >&2; exit 1; }
if dpkg -s placement >/dev/null 2>&1 || [ -e /usr/bin/placement ] || [ -e /etc/placement ]; then
    echo "FAILED: this machine already has a placement installed; the package check needs a machine without one" >&2
    exit 1
fi
INSTALLED_HERE=1
DEBIAN_FRONTEND=noninteractive dpkg -i "$DEB" >"$WORK/dpkg-i.txt" 2>&1 || { cat "$WORK/dpkg-i.txt" >&2; echo "FAILED: dpkg -i" >&2; exit 1; }
getent passwd placement >/dev/null || { echo "FAILED: postinst made no placement user" >&2; exit 1; }
[ "$(stat -c '%U:%G %a' /etc/placement/placement.env)" = "root:root 600" ] \
    || { echo "FAILED: placement.env is $(stat -c '%U:%G %a' /etc/placement/placement.env)" >&2; exit 1; }
[ "$(stat -c '%U:%G %a' /etc/placement/placement.conf)" = "root:placement 640" ] \
    || { echo "FAILED: placement.conf is $(stat -c '%U:%G %a' /etc/placement/placement.conf)" >&2; exit 1; }
OUT=$(systemd-analyze verify /lib/systemd/system/placement.service /lib/systemd/system/placement-agent.service 2>&1 || true)
[ -z "$OUT" ] || { echo "$OUT" >&2; echo "FAILED: the installed units do not verify" >&2; exit 1; }
[ "$(stat -c '%U:%G %a' /etc/placement/agent.env)" = "root:root 600" ] \
    || { echo "FAILED: agent.env is $(stat -c '%U:%G %a' /etc/placement/agent.env)" >&2; exit 1; }
# The database, as an operator makes it: a plain role owning its database.
"$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE pkg LOGIN NOSUPERUSER" -c "CREATE DATABASE pkg OWNER pkg"
PORT=$(free_port)
# The operator's edits: the environment file (secrets, address) and the
# conffile (noauth2 here: no Keystone in this check).
cat >>/etc/placement/placement.env <<ENV
DATABASE_URL=postgresql://pkg@127.0.0.1:$PGPORT/pkg
PLACEMENT_BIND=127.0.0.1:$PORT
ENV
sed -i 's/^auth_strategy = keystone$/auth_strategy = noauth2/' /etc/placement/placement.conf
UNIT=/lib/systemd/system/placement.service
unit_value() { sed -n "s/^$1=//p" "$UNIT"; }
[ "$(unit_value EnvironmentFile)" = "-/etc/placement/placement.env" ] || { echo "FAILED: EnvironmentFile" >&2; exit 1; }
as_unit() {  # (in a subshell, which it becomes) what systemd runs: the unit's user, the environment file's variables
    local envs
    mapfile -t envs < <(grep -E '^[A-Z_]+=' /etc/placement/placement.env)
    # setpriv execs (no parent in between): a signal reaches the server.
    exec setpriv --reuid="$(unit_value User)" --regid="$(unit_value Group)" --init-groups \
        env -i PATH=/usr/bin:/bin "${envs[@]}" "$@"
}
read -r -a pre <<<"$(unit_value ExecStartPre)"
read -r -a start <<<"$(unit_value ExecStart)"
(as_unit "${pre[@]}") >"$WORK/pre.txt" 2>&1 || { cat "$WORK/pre.txt" >&2; echo "FAILED: ExecStartPre" >&2; exit 1; }
as_unit "${start[@]}" >"$WORK/start.txt" 2>&1 &
SERVER_PID=$!
wait_for "http://127.0.0.1:$PORT/" "$SERVER_PID" "$WORK/start.txt"
RP=$(cat /proc/sys/kernel/random/uuid)
code=$(curl -s -o /dev/null -w '%{http_code}' -X POST -H 'x-auth-token: admin' -H 'content-type: application/json' \
    -H 'openstack-api-version: placement 1.20' -d "{\"name\": \"pkg-node\", \"uuid\": \"$RP\"}" \
    "http://127.0.0.1:$PORT/resource_providers")
[ "$code" = 200 ] || { echo "FAILED: the installed service answered $code to a provider's creation" >&2; exit 1; }
curl -sf -H 'x-auth-token: admin' "http://127.0.0.1:$PORT/resource_providers/$RP" | grep -q pkg-node \
    || { echo "FAILED: the provider was not read back" >&2; exit 1; }
kill -TERM "$SERVER_PID"; wait "$SERVER_PID" || true; SERVER_PID=
grep -q "shut down" /var/log/placement/placement.log \
    || { echo "FAILED: no log in /var/log/placement (log_dir)" >&2; cat "$WORK/start.txt" >&2; exit 1; }
[ "$(stat -c %U /var/log/placement/placement.log)" = placement ] || { echo "FAILED: the log's owner" >&2; exit 1; }
dpkg --purge placement >"$WORK/purge.txt" 2>&1 || { cat "$WORK/purge.txt" >&2; echo "FAILED: dpkg --purge" >&2; exit 1; }
INSTALLED_HERE=
for gone in /usr/bin/placement /etc/placement "$UNIT" /lib/systemd/system/placement-agent.service /var/log/placement /usr/share/doc/placement; do
    [ ! -e "$gone" ] || { echo "FAILED: $gone is left after the purge" >&2; exit 1; }
done
echo "packaging check: the package installs, runs as its unit says, answers, stops and purges ($(du -k "$DEB" | cut -f1) KiB)"
