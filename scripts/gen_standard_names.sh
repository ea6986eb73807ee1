#!/usr/bin/env bash
# Regenerate data/standard_resource_classes.txt and data/standard_traits.txt
# from the pinned os-resource-classes and os-traits packages (as the real
# Placement loads them at start-up). Run from the repository root.
set -euo pipefail
VENV=$(mktemp -d /tmp/stdnames.XXXXXX)
trap 'rm -rf "$VENV"' EXIT
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check 'os-traits==3.9.0' 'os-resource-classes==1.1.0'
"$VENV/bin/python" -c 'import os_resource_classes as r; print("\n".join(r.STANDARDS))' > data/standard_resource_classes.txt
"$VENV/bin/python" -c 'import os_traits as t; print("\n".join(sorted(t.get_traits())))' > data/standard_traits.txt
wc -l data/standard_resource_classes.txt data/standard_traits.txt
