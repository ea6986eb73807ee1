#!/usr/bin/env bash
# The oslo libraries judge the records the Rust tests hold the service to:
# - scripts/oslo_config_reads.py runs oslo.config (Placement 16.0.0's
#   options) on every case of tests/data/placement-conf/; its answer must be
#   tests/data/oslo-config-reads.json, which tests/startup/config.rs
#   compares the service's own reading with;
# - scripts/oslo_policy_decisions.py asks oslo.policy 6.0.1 (Placement's
#   rules) about every file of tests/data/policy-files/; its answers must be
#   tests/data/oslo-policy-decisions.json, which tests/startup/policy_files.rs
#   compares the service's decisions with.
# A difference means a record is stale or a case was added without
# recording it; each script's docstring says how to rewrite its record (in
# the venv below).
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
# oslo.policy warns about undefined rules on stderr: its own business.
"$VENV/bin/python" scripts/oslo_policy_decisions.py tests/data/policy-files >"$OUT" 2>/dev/null
if ! diff -u tests/data/oslo-policy-decisions.json "$OUT"; then
    echo "FAILED: oslo.policy decides under tests/data/policy-files/ otherwise than the record says" >&2
    exit 1
fi
files=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["files"]))' "$OUT")
echo "oslo check: oslo.config read $cases config cases and oslo.policy decided $files policy files as recorded"
