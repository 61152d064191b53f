#!/usr/bin/env bash
# The image the container driver's tests run sandboxes from: localhost/openshell-test-agent:local,
# built FROM scratch out of the host's python3, bash, curl and busybox (docker/agent/build.sh;
# it skips when its inputs did not change). Needs 10-apt.sh (python3, curl) and 20-podman.sh.
set -euo pipefail
repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
export CONTAINERS_CONF=${OPENSHELL_CONTAINERS_CONF:-/etc/openshell/containers.conf}
bash "$repo/docker/agent/build.sh"
