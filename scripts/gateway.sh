#!/usr/bin/env bash
# Sets up this machine (idempotent), builds, and runs the gateway in the foreground with its
# embedded defaults: a private PostgreSQL beside the state directory and the process driver.
# Extra arguments go to `openshell gateway start` (see --help).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash scripts/setup.sh >&2
cargo build --release --bins >&2
exec target/release/openshell gateway start "$@"
