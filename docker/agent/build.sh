#!/usr/bin/env bash
# Builds localhost/openshell-test-agent:local FROM scratch out of this host's python3, bash,
# curl and busybox-static, with every shared library ldd lists for them (and for Python's
# extension modules). Skips the build when an image with the same inputs hash (label
# org.openshell.inputs: these files plus the package versions) exists;
# OPENSHELL_AGENT_IMAGE_FORCE=1 rebuilds.
set -euo pipefail
umask 022   # folders made under a 077 umask would be unreadable inside the image

here=$(cd "$(dirname "$0")" && pwd)
image=${OPENSHELL_AGENT_IMAGE:-localhost/openshell-test-agent:local}
py=$(readlink -f /usr/bin/python3)
pylib=/usr/lib/$(basename "$py")
: "${CONTAINERS_CONF:=/etc/openshell/containers.conf}"
export CONTAINERS_CONF

for f in "$py" /usr/bin/bash /usr/bin/curl /bin/busybox /usr/sbin/ip /usr/bin/unshare /usr/bin/setsid; do
    [ -x "$f" ] || { echo "build.sh: $f is missing (packages python3, bash, curl, busybox-static, iproute2, util-linux)" >&2; exit 1; }
done

inputs=$(
    {
        cat "$here/Containerfile" "$here/build.sh"
        dpkg-query -W -f='${Package} ${Version} ${Architecture}\n' \
            "$(basename "$py")-minimal" "lib$(basename "$py")-stdlib" bash curl busybox-static libc6 libgcc-s1 ca-certificates iproute2 util-linux 2>/dev/null
    } | sha256sum | cut -c1-16
)
have=$(podman image inspect --format '{{index .Labels "org.openshell.inputs"}}' "$image" 2>/dev/null || true)
if [ "$have" = "$inputs" ] && [ -z "${OPENSHELL_AGENT_IMAGE_FORCE:-}" ]; then
    echo "build.sh: $image is up to date ($inputs)" >&2
    exit 0
fi

echo "build.sh: building $image ($inputs)" >&2
ctx=$(mktemp -d /var/tmp/openshell-agent-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
chmod 755 "$ctx"
root=$ctx/rootfs
mkdir -p "$root"/{bin,etc,tmp,root,usr/bin,usr/sbin,usr/local/bin,usr/lib,var/log,dev,proc,sys}
chmod 1777 "$root/tmp"
# Merged /usr, as on the host: libraries land under usr/ whichever path ldd reports.
mkdir -p "$root/usr/lib64"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"

copy_tree() { mkdir -p "$root$(dirname "$1")" && cp -a "$1" "$root$1"; }
# Python's standard library without its own test suite and caches.
copy_tree "$pylib"
rm -rf "$root$pylib/test" "$root$pylib"/*/test "$root$pylib/idlelib" "$root$pylib/tkinter" "$root$pylib/turtledemo"
find "$root$pylib" -name __pycache__ -prune -exec rm -rf {} +
cp -a "$py" "$root$py"
ln -s "$(basename "$py")" "$root/usr/bin/python3"
cp -a /usr/bin/bash "$root/usr/bin/bash"
cp -a /usr/bin/curl "$root/usr/bin/curl"
# iproute2's ip and util-linux's unshare and setsid: what isolation tests probe with.
cp -L /usr/sbin/ip "$root/usr/bin/ip"
cp -a /usr/bin/unshare /usr/bin/setsid "$root/usr/bin/"
copy_tree /etc/ssl/certs
copy_tree /usr/share/ca-certificates

# Every shared library the binaries and Python's extension modules load, at ldd's path, plus
# the C runtime any glibc-based image has (libgcc_s: the supervisor, bound in, needs it).
{ echo "$py"; echo /usr/bin/bash; echo /usr/bin/curl; echo /usr/sbin/ip; echo /usr/bin/unshare; find "$root$pylib" -name '*.so' | sed "s|^$root||"; } |
    xargs ldd 2>/dev/null |
    awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' |
    sort -u |
    while read -r lib; do
        [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"; }
    done
gcc_s=$(ldconfig -p | awk '/libgcc_s.so.1 .*x86-64|libgcc_s.so.1 \(libc6,x86-64/ { print $NF; exit }')
[ -n "$gcc_s" ] || gcc_s=$(find /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu -name libgcc_s.so.1 2>/dev/null | head -1)
[ -n "$gcc_s" ] || { echo "build.sh: libgcc_s.so.1 not found (package libgcc-s1)" >&2; exit 1; }
[ -e "$root$gcc_s" ] || { mkdir -p "$root$(dirname "$gcc_s")" && cp -L "$gcc_s" "$root$gcc_s"; }

# busybox: /bin/sh and coreutils-ish basics (in /usr/bin, which the default policy reads).
cp /bin/busybox "$root/usr/bin/busybox"
for applet in sh awk basename cat chmod cp cut date dirname echo env expr find grep head hostname \
    id kill ln ls mkdir mktemp mv od printf ps pwd readlink rm sed seq sleep sort stat tail tee \
    test timeout touch tr true false uname uniq wc which whoami xargs yes; do
    ln -s busybox "$root/usr/bin/$applet"
done
# /bin/sh and /bin/bash for scripts that name them (a real folder: buildah's COPY does not keep
# a top-level bin -> usr/bin link intact).
for b in sh bash; do ln -s "/usr/bin/$b" "$root/bin/$b"; done

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
