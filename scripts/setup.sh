#!/usr/bin/env bash
# Installs what building, running and testing the gateway needs on a fresh Debian machine.
# Idempotent: each step in setup.d/ checks before it installs. Run as root (CI does).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export OPENSHELL_REPO=$(cd "$here/.." && pwd)
for step in "$here"/setup.d/*.sh; do
    echo "==> setup: $(basename "$step")" >&2
    bash "$step"
done
