#!/usr/bin/env bash
# Runs every shell example of the README and docs/ as written, each against
# a fresh server of its own:
#
#   bash scripts/docs_check.sh [BINARY]      (default: target/release/placement)
#
# An example is a ```sh block. Each one runs in a fresh bash (errexit,
# pipefail) beside a server started the README's way, in its zero-config
# mode (its own PostgreSQL, in a fresh data directory) on 127.0.0.1:8778,
# the address the examples are written for. `curl` fails on an HTTP error
# status (--fail-with-body), so an example that gets a 4xx fails here as it
# would mislead a reader. HOME is a cached folder of its own, so an example
# that installs a tool into ~ installs it once.
#
# A block that is not an example to run against a server (the test command
# itself, benchmarks, commands for a Keystone) says so on the line before it:
#   <!-- docs-check: skip: WHY -->
# and is listed as skipped with its reason.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin docs_check "${1:-}") || exit 2

WORK=$(mktemp -d /tmp/docs-check.XXXXXX)
chmod 755 "$WORK"
DOCS_HOME=${XDG_CACHE_HOME:-$HOME/.cache}/placement-docs-home
mkdir -p "$DOCS_HOME"
SERVER_PID=""
cleanup() { stop "$SERVER_PID"; rm -rf "$WORK"; }
trap cleanup EXIT

if (exec 3<>/dev/tcp/127.0.0.1/8778) 2>/dev/null; then
    echo "docs_check: something already listens on 127.0.0.1:8778, the examples' address: stop it first" >&2
    exit 1
fi

# The blocks, one file each, with where they stand; skipped ones listed.
python3 - "$WORK" README.md docs/*.md <<'EOF'
import os, re, sys
out = sys.argv[1]
n = 0
with open(os.path.join(out, 'index'), 'w') as index:
    for path in sys.argv[2:]:
        lines = open(path).read().splitlines()
        i = 0
        while i < len(lines):
            if re.match(r'^```(sh|bash|shell)\s*$', lines[i]):
                start = i + 1
                end = start
                while end < len(lines) and not lines[end].startswith('```'):
                    end += 1
                before = next((l for l in reversed(lines[:i]) if l.strip()), '')
                skip = re.match(r'^<!-- docs-check: skip: (.*) -->$', before.strip())
                n += 1
                where = '%s:%d' % (path, i + 1)
                if skip:
                    index.write('skip\t%s\t%s\n' % (where, skip.group(1)))
                else:
                    name = os.path.join(out, 'block-%02d.sh' % n)
                    with open(name, 'w') as f:
                        f.write('\n'.join(lines[start:end]) + '\n')
                    index.write('run\t%s\t%s\n' % (where, name))
                i = end
            i += 1
EOF

RAN=0
FAILED=0
SKIPPED=0
while IFS=$'\t' read -r what where detail; do
    if [ "$what" = skip ]; then
        echo "skip $where: $detail"
        SKIPPED=$((SKIPPED + 1))
        continue
    fi
    data=$WORK/data-$RAN
    # Zero-config, as the README starts it: a DATABASE_URL from the caller
    # (scripts/test.sh exports one) would give every example one database.
    env -u DATABASE_URL "$BIN" serve --bind 127.0.0.1:8778 --data-dir "$data" \
        >"$WORK/server.log" 2>&1 </dev/null &
    SERVER_PID=$!
    wait_for http://127.0.0.1:8778/ "$SERVER_PID" "$WORK/server.log"
    set +e
    (
        cd "$WORK"
        export HOME=$DOCS_HOME
        # shellcheck disable=SC2317
        curl() { command curl -sS --fail-with-body "$@"; }
        export -f curl
        env -u DATABASE_URL bash -euo pipefail "$detail"
    ) >"$WORK/out" 2>&1 </dev/null
    status=$?
    set -e
    stop "$SERVER_PID"
    SERVER_PID=""
    RAN=$((RAN + 1))
    if [ "$status" = 0 ]; then
        echo "ok   $where"
    else
        FAILED=$((FAILED + 1))
        echo "FAIL $where (exit $status); the example:"
        sed 's/^/     | /' "$detail"
        echo "     its output:"
        grep -v '^Requirement already satisfied' "$WORK/out" | tail -n 30 | sed 's/^/     > /'
        echo "     the server's log:"
        tail -n 10 "$WORK/server.log" | sed 's/^/     # /'
    fi
done <"$WORK/index"

echo "docs examples: $((RAN - FAILED)) passed, $FAILED failed, $SKIPPED skipped"
[ "$FAILED" = 0 ]
