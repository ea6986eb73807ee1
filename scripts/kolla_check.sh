#!/usr/bin/env bash
# The kolla image (packaging/kolla) as kolla-ansible runs it, without Docker:
#
# 1. kolla-ansible 23.0.0's placement role (from its PyPI wheel) renders
#    config.json, placement.conf, the uWSGI ini and migrate-db.rc with
#    ansible, its defaults and group_vars, passwords from its own genpwd,
#    and the PostgreSQL URL given as an operator gives it: a
#    node_custom_config placement.conf that merge_configs lays over kolla's.
# 2. A scratch root laid out as packaging/kolla/Dockerfile lays out the
#    image: kolla 23.0.0's base files (kolla_start, kolla_set_configs,
#    sudoers, copy_cacerts, install_projects) and the placement images'
#    extend_start scripts where kolla's Dockerfiles put them, its users
#    (placement 42482, kolla 42400, fluentd 42474), this service's binary
#    and the image's uwsgi, placement-manage and placement-status; the
#    rendered files mounted read-only at /var/lib/kolla/config_files.
# 3. kolla_start runs there as the placement user, in a mount namespace of
#    its own: the bootstrap (KOLLA_BOOTSTRAP: db sync into a real
#    PostgreSQL as a plain role), then the service, which answers on the
#    ini's address, logs to kolla's log file in oslo.log's format, and
#    refuses a token-less API call (kolla's Keystone settings); then the
#    upgrade steps (KOLLA_UPGRADE, KOLLA_OSM) and placement-status upgrade
#    check.
#
#   bash scripts/kolla_check.sh [BINARY]   (root: chroot, mounts, sudo)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin kolla_check "${1:-}") || exit 2
HERE=$(pwd)
fail() { echo "FAILED: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "the kolla check needs root (a chroot, mounts, sudo as kolla's image has it)"
command -v sudo >/dev/null || fail "sudo is not installed (apt-get install sudo): kolla_start runs kolla_set_configs through it"

KOLLA_VERSION=23.0.0
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/placement-kolla
VENV=$CACHE/venv
# ansible-core 2.19 (kolla-ansible 23 asks for 2.20, which needs Python
# 3.12; the role's tasks and templates render alike) and the collections
# kolla's group_vars use (ansible.utils), from the `ansible` package.
ensure_venv "$VENV" "ansible, ansible_collections.ansible.utils, netaddr, bcrypt, hvac, oslo_utils, jmespath" \
    'ansible-core>=2.19,<2.20' 'ansible>=12,<13' netaddr bcrypt hvac oslo.utils jmespath >&2
WHEELS=$CACHE/wheels-$KOLLA_VERSION
if [ ! -d "$WHEELS/kolla-ansible" ] || [ ! -d "$WHEELS/kolla" ]; then
    echo "==> kolla-ansible and kolla $KOLLA_VERSION from PyPI"
    rm -rf "$WHEELS" && mkdir -p "$WHEELS/dl"
    "$VENV/bin/pip" download -q --no-deps --python-version 3.12 --only-binary=:all: -d "$WHEELS/dl" \
        "kolla-ansible==$KOLLA_VERSION" "kolla==$KOLLA_VERSION"
    python3 -m zipfile -e "$WHEELS"/dl/kolla_ansible-*.whl "$WHEELS/kolla-ansible"
    python3 -m zipfile -e "$WHEELS"/dl/kolla-*-py3-none-any.whl "$WHEELS/kolla"
fi
KA=$WHEELS/kolla-ansible
ANSIBLE_DIR=$KA/kolla_ansible-$KOLLA_VERSION.data/data/share/kolla-ansible/ansible
KOLLA_DOCKER=$WHEELS/kolla/kolla/docker

WORK=$(mktemp -d /tmp/kolla-check.XXXXXX)
chmod 755 "$WORK"
NS_PID=
cleanup() {
    pkill -u 42482 -f /usr/local/bin/placement 2>/dev/null || true
    [ -n "$NS_PID" ] && kill "$NS_PID" 2>/dev/null || true
    stop_postgres "$WORK/pg"
    rm -rf "$WORK"
}
trap cleanup EXIT

# --- the database: PostgreSQL, a plain role owning its database -------------------
mkdir -p "$WORK/pg"
start_postgres "$WORK/pg" >/dev/null
"$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -q -v ON_ERROR_STOP=1 \
    -c "CREATE ROLE placement LOGIN NOSUPERUSER" -c "CREATE DATABASE placement OWNER placement"
PORT=$(free_port)

# --- 1. kolla-ansible renders the role's files ----------------------------------------
echo "==> kolla-ansible $KOLLA_VERSION renders the placement role"
mkdir -p "$WORK/inventory" "$WORK/custom" "$WORK/node-config"
ln -s "$ANSIBLE_DIR/group_vars" "$WORK/inventory/group_vars"
cat >"$WORK/inventory/hosts" <<INV
[placement-api]
localhost ansible_connection=local ansible_python_interpreter=$VENV/bin/python
[memcached]
localhost
INV
cp "$KA/kolla_ansible-$KOLLA_VERSION.data/data/share/kolla-ansible/etc_examples/kolla/passwords.yml" "$WORK/passwords.yml"
PYTHONPATH=$KA "$VENV/bin/python" -m kolla_ansible.cmd.genpwd -p "$WORK/passwords.yml" >/dev/null
# The one override docs/deploying.md asks for: the PostgreSQL URL.
cat >"$WORK/custom/placement.conf" <<CONF
[placement_database]
connection = postgresql://placement@127.0.0.1:$PGPORT/placement
CONF
# globals.yml as a one-host deployment sets it: the API network on
# loopback (this check's traffic stays on 127.0.0.1), the port free here.
PYTHONPATH=$KA ANSIBLE_ROLES_PATH=$ANSIBLE_DIR/roles ANSIBLE_ACTION_PLUGINS=$ANSIBLE_DIR/action_plugins \
    ANSIBLE_FILTER_PLUGINS=$ANSIBLE_DIR/filter_plugins ANSIBLE_LIBRARY=$ANSIBLE_DIR/library \
    ANSIBLE_MODULE_UTILS=$ANSIBLE_DIR/module_utils ANSIBLE_NOCOLOR=1 ANSIBLE_LOCALHOST_WARNING=0 \
    "$VENV/bin/ansible-playbook" -i "$WORK/inventory/hosts" "$HERE/scripts/kolla_render.yml" \
    -e "@$WORK/passwords.yml" -e network_interface=lo -e kolla_internal_vip_address=127.0.0.1 \
    -e "node_config_directory=$WORK/node-config" -e "node_custom_config=$WORK/custom" \
    -e "placement_api_listen_port=$PORT" >"$WORK/render.log" 2>&1 \
    || { tail -30 "$WORK/render.log" >&2; fail "kolla-ansible's placement role did not render"; }
RENDERED=$WORK/node-config/placement-api
for f in config.json placement.conf placement-api-uwsgi.ini migrate-db.rc; do
    [ -s "$RENDERED/$f" ] || fail "kolla-ansible rendered no $f"
done
grep -q "^http = 127.0.0.1:$PORT$" "$RENDERED/placement-api-uwsgi.ini" || fail "the uWSGI ini's address: $(grep http "$RENDERED/placement-api-uwsgi.ini")"
grep -q "^connection = postgresql://" "$RENDERED/placement.conf" || fail "merge_configs did not lay the PostgreSQL URL over kolla's"

# --- 2. a root laid out as the image ---------------------------------------------------
echo "==> the image's layout in a scratch root"
R=$WORK/root
mkdir -p "$R"/{usr,dev,proc,tmp,run,var/lib/kolla/config_files,var/lib/kolla/venv/bin,var/log/kolla,usr-local/bin}
chmod 1777 "$R/tmp"
for d in bin sbin lib lib64; do [ -L "/$d" ] && ln -s "usr/$d" "$R/$d"; done
cp -a /etc "$R/etc"
# kolla's users and groups (kolla/common/users.py), in place of any of
# those names this host has (the package check's `placement`, say).
for f in passwd group shadow; do
    sed -i -E '/^(placement|kolla|fluentd):/d' "$R/etc/$f"
done
cat >>"$R/etc/group" <<GRP
kolla:x:42400:placement,fluentd
fluentd:x:42474:
placement:x:42482:
GRP
cat >>"$R/etc/passwd" <<PW
kolla:x:42400:42400::/var/lib/kolla:/usr/sbin/nologin
fluentd:x:42474:42474::/var/lib/fluentd:/usr/sbin/nologin
placement:x:42482:42482::/var/lib/placement:/usr/sbin/nologin
PW
printf 'placement:!:20000::::::\nkolla:!:20000::::::\nfluentd:!:20000::::::\n' >>"$R/etc/shadow"
mkdir -p "$R/var/lib/placement" && chown 42482:42482 "$R/var/lib/placement"
# What kolla's base and placement Dockerfiles copy, where they copy it.
LB=$R/usr-local/bin
install -m 0755 "$KOLLA_DOCKER/base/set_configs.py" "$LB/kolla_set_configs"
install -m 0755 "$KOLLA_DOCKER/base/start.sh" "$LB/kolla_start"
install -m 0755 "$KOLLA_DOCKER/base/copy_cacerts.sh" "$LB/kolla_copy_cacerts"
install -m 0755 "$KOLLA_DOCKER/base/install_projects.sh" "$LB/kolla_install_projects"
install -m 0644 "$KOLLA_DOCKER/placement/placement-base/extend_start.sh" "$LB/kolla_extend_start"
install -m 0644 "$KOLLA_DOCKER/placement/placement-api/extend_start.sh" "$LB/kolla_placement_extend_start"
install -m 0440 "$KOLLA_DOCKER/base/sudoers" "$R/etc/sudoers"
rm -rf "$R/etc/sudoers.d" && mkdir -p "$R/etc/sudoers.d"
chown :42400 "$R/var/log/kolla" && chmod 2775 "$R/var/log/kolla"
# What packaging/kolla/Dockerfile adds.
install -m 0755 "$BIN" "$LB/placement"
for f in uwsgi placement-manage placement-status; do
    install -m 0755 "packaging/kolla/$f" "$R/var/lib/kolla/venv/bin/$f"
done
grep -q "COPY --from=service /usr/local/bin/placement /usr/local/bin/placement" packaging/kolla/Dockerfile \
    || fail "packaging/kolla/Dockerfile no longer puts the binary where this check does"

# run_container LOG [VAR=value...] [COMMAND...]: COMMAND (kolla_start, the
# image's CMD, by default) as the container runs it: its user, its
# environment, in a mount namespace whose mounts end with it.
run_container() {
    local mode=$1
    shift
    unshare --mount --propagation private --fork -- bash -c '
        set -e
        R=$1; RENDERED=$2; shift 2
        mount --bind /usr "$R/usr" && mount -o remount,bind,ro "$R/usr"
        mount --bind "$R/usr-local" "$R/usr/local"
        mount --bind "$RENDERED" "$R/var/lib/kolla/config_files" && mount -o remount,bind,ro "$R/var/lib/kolla/config_files"
        mount --rbind /dev "$R/dev"
        mount -t proc proc "$R/proc"
        exec chroot --userspec=42482:42482 --groups=42400 "$R" /usr/bin/env -i \
            PATH=/var/lib/kolla/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
            HOME=/var/lib/placement KOLLA_CONFIG_STRATEGY=COPY_ALWAYS KOLLA_SERVICE_NAME=placement-api \
            "$@"' run-container "$R" "$RENDERED" "$@" >"$WORK/$mode.log" 2>&1
}
kolla_start() { local mode=$1; shift; run_container "$mode" "$@" /usr/local/bin/kolla_start; }

# --- 3. bootstrap, serve, upgrade ------------------------------------------------------
echo "==> kolla_start: the bootstrap container (KOLLA_BOOTSTRAP)"
kolla_start bootstrap KOLLA_BOOTSTRAP= || { tail -30 "$WORK/bootstrap.log" >&2; fail "the bootstrap"; }
grep -q "migrations applied" "$WORK/bootstrap.log" || { tail -20 "$WORK/bootstrap.log" >&2; fail "the bootstrap ran no db sync"; }
tables=$("$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U placement -d placement -tAc \
    "SELECT count(*) FROM pg_tables WHERE tablename = 'resource_providers' AND tableowner = 'placement'")
[ "$tables" = 1 ] || fail "the bootstrap did not migrate PostgreSQL"

echo "==> kolla_start: the service"
kolla_start serve &
NS_PID=$!
wait_for "http://127.0.0.1:$PORT/" "$NS_PID" "$WORK/serve.log"
grep -q "Running command: 'uwsgi /etc/placement/placement-api-uwsgi.ini'" "$WORK/serve.log" \
    || fail "kolla_start did not run config.json's command"
curl -sf "http://127.0.0.1:$PORT/" | grep -qE '"max_version": ?"1.39"' || fail "the version document"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/resource_providers")
[ "$code" = 401 ] || fail "a token-less call answered $code (kolla's config asks for Keystone)"
SERVER=$(pgrep -u 42482 -f /usr/local/bin/placement | head -1)
[ -n "$SERVER" ] || fail "no server process of the placement user"
LOG=$R/var/log/kolla/placement/placement-api.log
[ "$(stat -c %U:%G "$LOG")" = "42482:42400" ] || [ "$(stat -c %u:%g "$LOG")" = "42482:42400" ] \
    || fail "kolla's log file belongs to $(stat -c %u:%g "$LOG")"
grep -q ' INFO placement.requestlog \[None req-[0-9a-f-]* - - - - - -\] 127.0.0.1 "GET /resource_providers" status: 401 ' "$LOG" \
    || { tail -5 "$LOG" >&2; fail "no oslo.log request line in kolla's log file"; }
kill -TERM "$SERVER"
wait "$NS_PID" || true
NS_PID=
grep -q "shut down" "$LOG" || fail "the service did not stop cleanly on SIGTERM"

echo "==> kolla_start: the upgrade step (KOLLA_UPGRADE) and placement-status"
kolla_start upgrade KOLLA_UPGRADE= || { tail -30 "$WORK/upgrade.log" >&2; fail "the upgrade step"; }
grep -q "0 migrations applied" "$WORK/upgrade.log" || fail "the upgrade step's db sync: $(tail -3 "$WORK/upgrade.log")"
# kolla-ansible's upgrade then runs the online data migrations (KOLLA_OSM).
kolla_start osm KOLLA_OSM= || { tail -30 "$WORK/osm.log" >&2; fail "the online data migrations step"; }
grep -q "no online data migrations to run" "$WORK/osm.log" || fail "the KOLLA_OSM step: $(tail -3 "$WORK/osm.log")"
status=0
run_container status placement-status upgrade check || status=$?
[ "$status" = 0 ] || { cat "$WORK/status.log" >&2; fail "placement-status upgrade check exited $status"; }
grep -q "Check: Missing Root Provider IDs" "$WORK/status.log" || fail "placement-status's table"
echo "kolla check: kolla-ansible $KOLLA_VERSION's rendered files run through kolla's start flow; bootstrap, serve on the ini's address, upgrade, status"
