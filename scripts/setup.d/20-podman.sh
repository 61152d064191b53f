#!/usr/bin/env bash
# Container engine for the integration tests: rootful podman serving the Docker API on
# /run/openshell-podman.sock (what testcontainers talks to), plus the local image
# localhost/openshell-postgres:15 built FROM scratch out of the host's PostgreSQL 15
# (no image registry is reachable). Idempotent; a repeated run takes well under a second.
#
# Tunables (environment): OPENSHELL_PODMAN_SOCK (socket path),
# OPENSHELL_CONTAINERS_CONF (where the containers.conf is written).
set -euo pipefail
umask 022

repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
sock=${OPENSHELL_PODMAN_SOCK:-/run/openshell-podman.sock}
conf=${OPENSHELL_CONTAINERS_CONF:-/etc/openshell/containers.conf}
log=/var/log/openshell-podman.log
pidfile=${sock%.sock}.pid

say() { echo "20-podman: $* (${SECONDS}s)" >&2; }

# 1. Packages. crun fails on this kernel's hybrid cgroups, so runc; busybox-static is the
#    shell inside the PostgreSQL image; iptables is what netavark uses for port mappings.
need=()
for pkg in podman runc conmon netavark busybox-static iptables; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q '^install ok installed$' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# 2. containers.conf. The hard limits here are nofile 20000 and nproc ~96000, so podman's
#    default ulimits (nofile 1048576) make every container fail to start.
nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] && nofile=1048576
[ "$nofile" -gt 65536 ] && nofile=65536
nproc=$(ulimit -Hu); [ "$nproc" = unlimited ] && nproc=4096
[ "$nproc" -gt 4096 ] && nproc=4096
mkdir -p "$(dirname "$conf")"
want=$(cat <<CONF
# Written by scripts/setup.d/20-podman.sh. Read by podman through CONTAINERS_CONF and the
# drop-in /etc/containers/containers.conf.d/50-openshell.conf.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
)
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
    printf '%s\n' "$want" >"$conf"
    say "wrote $conf"
    conf_changed=1
fi
export CONTAINERS_CONF=$conf
# Also a drop-in, so that a plain `podman run` (a person debugging) works too.
dropin=/etc/containers/containers.conf.d/50-openshell.conf
if [ "$(readlink "$dropin" 2>/dev/null)" != "$conf" ]; then
    mkdir -p "$(dirname "$dropin")"
    ln -sfn "$conf" "$dropin"
fi

# 3. The Docker-compatible API service.
ping() { curl -sf --max-time 2 --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; }
if [ -n "${conf_changed:-}" ] && ping; then
    say "configuration changed: restarting the API service"
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -n "$pid" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "system service"; then
        kill "$pid"
    fi
    for _ in $(seq 50); do ping || break; sleep 0.1; done
    ping && { say "the API service on $sock was not started by this script: stop it, then rerun"; exit 1; }
fi
if ! ping; then
    say "starting podman system service on $sock (log: $log)"
    rm -f "$sock"
    # From /: conmon inherits the service's working directory and fails once it is gone.
    (cd / && exec setsid nohup podman system service --time=0 "unix://$sock" >>"$log" 2>&1 </dev/null) &
    echo $! >"$pidfile"
    for _ in $(seq 100); do ping && break; sleep 0.1; done
    ping || { tail -20 "$log" >&2; say "the API service did not answer on $sock"; exit 1; }
fi

# 4. The PostgreSQL image (the build script skips when its inputs did not change).
bash "$repo/docker/postgres/build.sh"
