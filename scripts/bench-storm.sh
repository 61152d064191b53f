#!/usr/bin/env bash
# The long storm: 10,000 create attempts from three stores (replicas) on one database, with
# stops, grant updates and killed connections; prints creates/s, retries and the invariants
# (see crates/store/tests/storm.rs, which CI runs with 1,000). STORM_CREATES overrides.
# Uses OPENSHELL_TEST_DATABASE_URL when set, else a container (as the tests do).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${OPENSHELL_TEST_DATABASE_URL:-}" ] && [ -z "${DOCKER_HOST:-}" ]; then
    export DOCKER_HOST=unix:///run/openshell-podman.sock
fi
export STORM_CREATES="${STORM_CREATES:-10000}"
exec cargo test --release -p openshell-store --test storm -- --nocapture
