#!/usr/bin/env bash
# The image of the proposal's own command (`openshell sandbox create --from pi-agent:local
# ... -- pi`): localhost/pi-agent:local, built FROM scratch by docker/pi-agent/build.sh out of
# the Pi install 45-mcp-clients.sh pinned (it skips when its inputs did not change). Needs
# 20-podman.sh and 45-mcp-clients.sh.
set -euo pipefail
repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
export CONTAINERS_CONF=${OPENSHELL_CONTAINERS_CONF:-/etc/openshell/containers.conf}
bash "$repo/docker/pi-agent/build.sh"
