#!/usr/bin/env bash
# What the operations tests run: a real Prometheus (the scrape test, tests/e2e/metrics.rs) and
# Patroni with etcd (the failover test and bench, tests/e2e/failover.rs, scripts/bench-failover.sh).
# Only the programs: none of their services is started here (each test starts its own on
# loopback, in a folder of its own, and stops it).
set -euo pipefail
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v patroni >/dev/null || need+=(patroni)
command -v etcd >/dev/null || need+=(etcd-server)
command -v etcdctl >/dev/null || need+=(etcd-client)
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    # A policy-rc.d of our own (unless one is there) keeps the packages' services stopped.
    ours=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && ours=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"
    [ "$ours" = 0 ] || rm -f /usr/sbin/policy-rc.d
fi
