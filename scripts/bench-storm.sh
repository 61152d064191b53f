#!/usr/bin/env bash
# The long storms, each 10,000 create attempts (STORM_CREATES overrides), printing creates/s,
# retries and the invariant results (os_invariants(), sql/invariants.sql):
#
# 1. gateways: three `openshell-gateway` processes (the debug binaries, process driver, real
#    isolated sandboxes) on one database, each SIGKILLed and restarted STORM_KILLS times
#    (default 5) at random points; clients across all three fire creates (a fifth repeat a
#    request id), stops and grant updates (tests/e2e/storm.rs; CI runs 1,000 with 2 kills each);
# 2. stores: three stores on one database with killed connections, no sandboxes
#    (crates/store/tests/storm.rs, release build; CI runs 1,000).
#
# STORM_ONLY=gateways or STORM_ONLY=stores runs one. Uses OPENSHELL_TEST_DATABASE_URL when
# set, else a container (as the tests do). Runs as root (the process driver isolates).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${OPENSHELL_TEST_DATABASE_URL:-}" ] && [ -z "${DOCKER_HOST:-}" ]; then
    export DOCKER_HOST=unix:///run/openshell-podman.sock
fi
export STORM_CREATES="${STORM_CREATES:-10000}" STORM_KILLS="${STORM_KILLS:-5}"
only=${STORM_ONLY:-}
if [ "$only" != stores ]; then
    cargo build --workspace --bins
    cargo test -p openshell-e2e --test e2e -- storm:: --nocapture
fi
if [ "$only" != gateways ]; then
    cargo test --release -p openshell-store --test storm -- --nocapture
fi
