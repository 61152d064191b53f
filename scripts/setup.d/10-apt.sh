#!/usr/bin/env bash
# Debian packages: the PostgreSQL server (embedded default and test server) and psql, and the
# programs the isolation tests run inside sandboxes, and newuidmap/newgidmap for a non-root gateway.
set -euo pipefail
need=()
[ -x /usr/lib/postgresql/15/bin/postgres ] || need+=(postgresql-15)
command -v psql >/dev/null || need+=(postgresql-client-15)
# What sandboxes and the isolation tests run: bash, python3, curl, unshare, ip.
for cmd in bash:bash python3:python3-minimal curl:curl unshare:util-linux ip:iproute2 newuidmap:uidmap; do
    command -v "${cmd%%:*}" >/dev/null || need+=("${cmd#*:}")
done
if [ ${#need[@]} -gt 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
