#!/usr/bin/env bash
# Sets up this machine (idempotent), then runs every check: formatting, clippy, and the whole
# test suite against real PostgreSQL (testcontainers on the local podman, or the server named
# by OPENSHELL_TEST_DATABASE_URL), real z3 and real processes.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
bash scripts/setup.sh >&2
if [ -z "${OPENSHELL_TEST_DATABASE_URL:-}" ] && [ -z "${DOCKER_HOST:-}" ]; then
    export DOCKER_HOST=unix:///run/openshell-podman.sock
fi
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
# The end-to-end suite runs the workspace binaries (gateway, supervisor, CLI): build them first.
cargo build --workspace --bins
# Every test binary runs even after one fails, so one run reports every failure.
cargo test --workspace --no-fail-fast
# The escape suite again, its sandboxes claiming pooled supervisors (crates/driver/src/pool.rs),
# whose inits were cloned before their sandboxes existed: they must isolate as cold starts do.
OPENSHELL_TEST_SANDBOX_POOL=2 cargo test -p openshell-e2e --test e2e -- escape::
