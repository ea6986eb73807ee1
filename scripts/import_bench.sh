#!/usr/bin/env bash
# How long `placement import` takes (and so the API's downtime during a
# switch-over) from a Placement on MariaDB at scale:
#
#   bash scripts/import_bench.sh [BINARY] [PROVIDERS] [CONSUMERS] [RUNS]
#
# (defaults: target/release/placement, 10000 providers, 50000 consumers of
# two allocations each = 100,000 allocations, 3 runs). Placement 16.0.0's
# schema is made by its own `placement-manage db sync` on a throwaway
# MariaDB, filled with SQL (each provider VCPU, MEMORY_MB and DISK_GB with
# ratios MySQL keeps single-precision; consumers of 100 projects and 100
# users), and imported into a fresh PostgreSQL database owned by a plain
# role, RUNS times. Prints each run's wall time and the median.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin import_bench "${1:-}") || exit 2
PROVIDERS=${2:-10000}
CONSUMERS=${3:-50000}
RUNS=${4:-3}
VENV=$(placement_venv)
WORK=$(mktemp -d /tmp/import-bench.XXXXXX)
chmod 755 "$WORK"
cleanup() {
    stop_mariadb "$WORK/mariadb"
    stop_postgres "$WORK"
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_postgres "$WORK"
"$PGBIN/psql" -h 127.0.0.1 -p "$PGPORT" -U postgres -q -c "CREATE ROLE placement LOGIN"
start_mariadb "$WORK/mariadb"
mariadb --no-defaults -S "$MY_SOCK" -e "
    CREATE DATABASE placement CHARACTER SET utf8;
    CREATE USER 'placement'@'127.0.0.1' IDENTIFIED BY 'pw';
    GRANT ALL ON placement.* TO 'placement'@'127.0.0.1';"
URL="mysql+pymysql://placement:pw@127.0.0.1:$MY_PORT/placement?charset=utf8"
printf '[placement_database]\nconnection = %s\n' "$URL" >"$WORK/placement.conf"
"$VENV/bin/placement-manage" --config-file "$WORK/placement.conf" db sync >"$WORK/sync.log" 2>&1 \
    || { cat "$WORK/sync.log" >&2; exit 1; }

echo "==> filling Placement's schema: $PROVIDERS providers, $CONSUMERS consumers, $((CONSUMERS * 2)) allocations"
python3 - "$PROVIDERS" "$CONSUMERS" >"$WORK/fill.sql" <<'PY'
import sys, uuid, random
providers, consumers = int(sys.argv[1]), int(sys.argv[2])
random.seed(7)
u = lambda: str(uuid.UUID(int=random.getrandbits(128)))  # noqa: E731
def rows(table, cols, values, batch=2000):
    for i in range(0, len(values), batch):
        chunk = values[i:i + batch]
        print(f"INSERT INTO {table} ({', '.join(cols)}) VALUES")
        print(",\n".join("(" + ", ".join(v) + ", NOW())" for v in chunk) + ";")
q = lambda s: "'" + s + "'"  # noqa: E731
print("SET autocommit = 0;")
rows("resource_providers", ["id", "uuid", "name", "generation", "root_provider_id", "parent_provider_id", "created_at"],
     [[str(i), q(u()), q(f"cn{i}"), "3", str(i), "NULL"] for i in range(1, providers + 1)])
ratios = ["0.9", "1.5", "3.3", "16.0"]
rows("inventories", ["resource_provider_id", "resource_class_id", "total", "reserved", "min_unit", "max_unit",
                     "step_size", "allocation_ratio", "created_at"],
     [[str(i), str(rc), total, "0", "1", total, "1", ratios[(i + rc) % 4]]
      for i in range(1, providers + 1) for rc, total in ((0, "64"), (1, "262144"), (2, "2000"))])
rows("projects", ["id", "external_id", "created_at"], [[str(i), q(f"project-{i}")] for i in range(1, 101)])
rows("users", ["id", "external_id", "created_at"], [[str(i), q(f"user-{i}")] for i in range(1, 101)])
cons = [u() for _ in range(consumers)]
rows("consumers", ["id", "uuid", "project_id", "user_id", "generation", "created_at"],
     [[str(i + 1), q(c), str(i % 100 + 1), str(i * 7 % 100 + 1), "1"] for i, c in enumerate(cons)])
rows("allocations", ["resource_provider_id", "consumer_id", "resource_class_id", "used", "created_at"],
     [[str(i % providers + 1), q(c), str(rc), used]
      for i, c in enumerate(cons) for rc, used in ((0, "1"), (1, "2048"))])
print("COMMIT;")
PY
mariadb --no-defaults -S "$MY_SOCK" placement <"$WORK/fill.sql"

times=()
for run in $(seq "$RUNS"); do
    "$PGBIN/createdb" -h 127.0.0.1 -p "$PGPORT" -U postgres -O placement "bench$run"
    start=$(date +%s%N)
    PLACEMENT_IMPORT_FROM="$URL" DATABASE_URL="postgresql://placement@127.0.0.1:$PGPORT/bench$run" \
        "$BIN" import >"$WORK/import$run.txt"
    ms=$(( ($(date +%s%N) - start) / 1000000 ))
    grep -q "allocations: $((CONSUMERS * 2))$" "$WORK/import$run.txt" || { cat "$WORK/import$run.txt" >&2; exit 1; }
    echo "run $run: $ms ms"
    times+=("$ms")
done
median=$(printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
echo "import from MariaDB of $PROVIDERS providers and $((CONSUMERS * 2)) allocations: median $median ms of $RUNS runs"
