# Helpers shared by the scripted checks (osc_check.sh, keystone_check.sh,
# import_check.sh); sourced, not run.

# ensure_venv DIR MODULES PACKAGE...: a venv at DIR where `import MODULES`
# works, installing PACKAGE... into it the first time (then cached).
ensure_venv() {
    local dir=$1 modules=$2
    shift 2
    if ! "$dir/bin/python" -c "import $modules" 2>/dev/null; then
        echo "==> installing $* into $dir"
        python3 -m venv "$dir"
        "$dir/bin/pip" install -q --disable-pip-version-check "$@"
    fi
}

# free_port: a loopback port nobody listens on now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_for URL PID LOG: until URL answers; fails with LOG's tail if the
# process PID exits or a minute passes.
wait_for() {
    for _ in $(seq 600); do
        if curl -sf -o /dev/null "$1"; then return 0; fi
        kill -0 "$2" 2>/dev/null || { echo "FAILED: the process for $1 exited:" >&2; tail -n 30 "$3" >&2; exit 1; }
        sleep 0.1
    done
    echo "FAILED: $1 never answered" >&2; tail -n 30 "$3" >&2; exit 1
}

# stop PID: SIGTERM, up to 10 s, then SIGKILL (no-op without a PID).
stop() {
    [ -n "${1:-}" ] || return 0
    kill "$1" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$1" 2>/dev/null || true
}

# placement_venv: the path of the venv holding the real OpenStack Placement
# 16.0.0 (its gabbits, its policy rules, and the server the import check
# runs) with gabbi, installed the first time (then cached). Prints the path.
placement_venv() {
    local venv=${PLACEMENT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/placement-real/venv}
    ensure_venv "$venv" "placement, psycopg2, gunicorn, gabbi" \
        'openstack-placement==16.0.0' psycopg2-binary gunicorn 'gabbi==4.2.3' >&2
    echo "$venv"
}
