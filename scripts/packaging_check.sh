#!/usr/bin/env bash
# packaging/systemd/placement.service is a unit systemd accepts, and
# hardened: systemd-analyze verifies it (with /usr/bin/placement pointing
# at the built binary) and rates its exposure at most 2.0 ("OK").
#
#   bash scripts/packaging_check.sh [BINARY]   (default: target/release/placement)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
BIN=$(release_bin packaging_check "${1:-}") || exit 2
command -v systemd-analyze >/dev/null || { echo "packaging check: systemd-analyze is not installed (apt-get install systemd)" >&2; exit 1; }
WORK=$(mktemp -d /tmp/packaging-check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

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
