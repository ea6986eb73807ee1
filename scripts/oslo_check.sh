#!/usr/bin/env bash
# The oslo libraries judge the records the Rust tests hold the service to:
# scripts/oslo_config_reads.py runs oslo.config (Placement 16.0.0's
# options) on every case of tests/data/placement-conf/, and its answer must
# be tests/data/oslo-config-reads.json, which tests/startup/config.rs
# compares the service's own reading with. A difference means the record
# is stale or a case was added without recording it:
#   python scripts/oslo_config_reads.py tests/data/placement-conf > tests/data/oslo-config-reads.json
# (in the venv below) rewrites it.
#
# Venv: ${PLACEMENT_VENV:-~/.cache/placement-real/venv} (scripts/lib.sh).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
VENV=$(placement_venv)
OUT=$(mktemp /tmp/oslo-config-reads.XXXXXX)
trap 'rm -f "$OUT"' EXIT

"$VENV/bin/python" scripts/oslo_config_reads.py tests/data/placement-conf >"$OUT"
if ! diff -u tests/data/oslo-config-reads.json "$OUT"; then
    echo "FAILED: oslo.config reads tests/data/placement-conf/ otherwise than the record says" >&2
    exit 1
fi
cases=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$OUT")
echo "oslo check: oslo.config read $cases cases as recorded"
