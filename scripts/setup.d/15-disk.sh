#!/usr/bin/env bash
# Sandboxes' disks (crates/disk): mkfs.ext4 formats each size's template image, and loop
# devices attach the images (the gateway drives /dev/loop-control itself, no losetup).
set -euo pipefail
if ! command -v mkfs.ext4 >/dev/null && [ ! -x /usr/sbin/mkfs.ext4 ] && [ ! -x /sbin/mkfs.ext4 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq e2fsprogs
fi
# Loop devices: built in on most kernels, a module on some.
if [ ! -e /dev/loop-control ]; then
    modprobe loop 2>/dev/null || true
fi
[ -e /dev/loop-control ] || echo "warning: no /dev/loop-control: sandboxes' disks need loop devices (or --disk-backend memory)" >&2
