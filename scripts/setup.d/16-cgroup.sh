#!/usr/bin/env bash
# Sandbox start-up: moving a sandbox's first process into its cgroup waits for an RCU grace
# period (5-20 ms) unless the cgroup v2 mount has `favordynmods`; the lock a move takes is
# shared by every hierarchy, so this also speeds up the v1 controllers of a hybrid host.
# The cost: forks and exits on the host take a slower lock (docs/sandbox.md#start-up-time).
# OPENSHELL_KEEP_CGROUP_MOUNT=1 leaves the mount as it is.
set -euo pipefail
[ "${OPENSHELL_KEEP_CGROUP_MOUNT:-}" = 1 ] && exit 0
[ "$(id -u)" = 0 ] || exit 0
target=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
[ -n "$target" ] || exit 0
if ! awk -v t="$target" '$2 == t && $3 == "cgroup2"' /proc/self/mounts | grep -q favordynmods; then
    mount -o remount,favordynmods "$target" \
        || echo "warning: could not remount $target with favordynmods: each sandbox start waits for the kernel" >&2
fi
