#!/usr/bin/env bash
# Builds the Debian package from this repository: the release binary, the
# systemd unit, /etc/placement with a config file and an environment file
# for secrets, the `placement` system user (made by postinst), and the docs.
#
#   bash packaging/deb/build.sh [BINARY] [OUT_DIR]
#   (defaults: target/release/placement, target/deb; prints the .deb's path)
#
# Only dpkg-deb is needed (no debhelper, no cargo-deb): the tree below is
# the package, file by file.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BIN=${1:-target/release/placement}
OUT=${2:-target/deb}
[ -x "$BIN" ] || { echo "build.sh: no binary at $BIN (cargo build --release)" >&2; exit 2; }
command -v dpkg-deb >/dev/null || { echo "build.sh: dpkg-deb is not installed" >&2; exit 2; }
VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
ARCH=$(dpkg --print-architecture)
ROOT=$(mktemp -d /tmp/placement-deb.XXXXXX)
chmod 0755 "$ROOT"
trap 'rm -rf "$ROOT"' EXIT

install -D -m 0755 "$BIN" "$ROOT/usr/bin/placement"
# Symbols are not needed to run; a third of the size.
if command -v strip >/dev/null; then strip --strip-unneeded "$ROOT/usr/bin/placement"; fi
install -D -m 0644 packaging/systemd/placement.service "$ROOT/lib/systemd/system/placement.service"
install -D -m 0644 packaging/systemd/placement-agent.service "$ROOT/lib/systemd/system/placement-agent.service"
install -D -m 0640 packaging/deb/placement.conf "$ROOT/etc/placement/placement.conf"
install -D -m 0600 packaging/deb/placement.env "$ROOT/etc/placement/placement.env"
install -D -m 0600 packaging/deb/agent.env "$ROOT/etc/placement/agent.env"
DOC=$ROOT/usr/share/doc/placement
install -d "$DOC"
install -m 0644 README.md docs/*.md "$DOC/"
install -m 0644 packaging/deb/copyright "$DOC/copyright"
install -D -m 0644 packaging/deb/lintian-overrides "$ROOT/usr/share/lintian/overrides/placement"
# A native package's changelog: this version, dated by the last commit.
{
    printf 'placement (%s) unstable; urgency=medium\n\n' "$VERSION"
    printf '  * Built from %s.\n\n' "$(git rev-parse --short HEAD 2>/dev/null || echo 'a source tree')"
    printf ' -- Placement developers <placement-dev@example.org>  %s\n' \
        "$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")"
} | gzip -9n >"$DOC/changelog.gz"
chmod 0644 "$DOC/changelog.gz"

install -d "$ROOT/DEBIAN"
SIZE=$(du -sk --exclude=DEBIAN "$ROOT" | cut -f1)
sed -e "s/@VERSION@/$VERSION/" -e "s/@ARCH@/$ARCH/" -e "s/@SIZE@/$SIZE/" \
    packaging/deb/control >"$ROOT/DEBIAN/control"
printf '/etc/placement/placement.conf\n/etc/placement/placement.env\n/etc/placement/agent.env\n' >"$ROOT/DEBIAN/conffiles"
for script in postinst prerm postrm; do
    install -m 0755 "packaging/deb/$script" "$ROOT/DEBIAN/$script"
done

mkdir -p "$OUT"
DEB=$OUT/placement_${VERSION}_${ARCH}.deb
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$DEB" >/dev/null
echo "$DEB"
