#!/usr/bin/env bash
# The failover storm, longer than the suite's (tests/e2e/failover.rs): Patroni and etcd on
# loopback, a primary and a synchronous standby, two gateways sharing them, the primary
# SIGKILLed under a storm of creates, stops and request_id repeats. Prints the seconds of
# unavailability the clients saw and, as the floor measured in the same run, the seconds
# Patroni took to promote the standby (the leader key's ttl, 20 s here), with their ratio.
#
#   FAILOVER_TASKS=12 FAILOVER_SECONDS_AFTER=30 scripts/bench-failover.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
export FAILOVER_TASKS=${FAILOVER_TASKS:-12} FAILOVER_SECONDS_AFTER=${FAILOVER_SECONDS_AFTER:-30}
bash scripts/setup.d/60-ops.sh
cargo build -q -p openshell-gateway --bins
cargo test -q -p openshell-e2e --test e2e -- failover:: --nocapture 2>&1 | grep -E "^failover:|test result|panicked"
