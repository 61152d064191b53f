#!/usr/bin/env bash
# Builds localhost/openshell-postgres:15 FROM scratch out of this host's PostgreSQL 15
# (postgresql-15), its shared libraries (as ldd lists them), busybox-static and entry.sh.
# Skips the build when an image with the same inputs hash (label org.openshell.inputs:
# these files plus the package versions) exists. OPENSHELL_PG_IMAGE_FORCE=1 rebuilds.
set -euo pipefail
umask 022   # folders made under a 077 umask would be unreadable inside the image

here=$(cd "$(dirname "$0")" && pwd)
image=${OPENSHELL_PG_IMAGE:-localhost/openshell-postgres:15}
pgver=15
pglib=/usr/lib/postgresql/$pgver
pgshare=/usr/share/postgresql/$pgver
: "${CONTAINERS_CONF:=/etc/openshell/containers.conf}"
export CONTAINERS_CONF

for f in "$pglib/bin/postgres" "$pglib/bin/initdb" /bin/busybox; do
    [ -x "$f" ] || { echo "build.sh: $f is missing (packages postgresql-$pgver, busybox-static)" >&2; exit 1; }
done

inputs=$(
    {
        cat "$here/Containerfile" "$here/entry.sh" "$here/build.sh"
        dpkg-query -W -f='${Package} ${Version} ${Architecture}\n' \
            "postgresql-$pgver" busybox-static libc6 tzdata 2>/dev/null
    } | sha256sum | cut -c1-16
)
have=$(podman image inspect --format '{{index .Labels "org.openshell.inputs"}}' "$image" 2>/dev/null || true)
if [ "$have" = "$inputs" ] && [ -z "${OPENSHELL_PG_IMAGE_FORCE:-}" ]; then
    echo "build.sh: $image is up to date ($inputs)" >&2
    exit 0
fi

echo "build.sh: building $image ($inputs)" >&2
ctx=$(mktemp -d /var/tmp/openshell-pg-image.XXXXXX)
trap 'rm -rf "$ctx"' EXIT
chmod 755 "$ctx"
root=$ctx/rootfs
mkdir -p "$root"/{bin,etc,tmp,usr/local/bin,usr/share,var/run/postgresql}
chmod 1777 "$root/tmp"

# PostgreSQL itself, without the LLVM JIT (it would pull in 100+ MB of libLLVM; jit is off).
# (No `cp --parents`: on some file systems it leaves 0700 folders behind and fails.)
copy_tree() { mkdir -p "$root$(dirname "$1")" && cp -a "$1" "$root$1"; }
copy_tree "$pglib"
copy_tree "$pgshare"
rm -rf "$root$pglib/lib/llvmjit"* "$root$pglib/lib/bitcode"
# Debian builds PostgreSQL against the system time zone database.
copy_tree /usr/share/zoneinfo

# Every shared library the binaries and modules load, at the path ldd reports.
find "$root$pglib" -type f \( -perm -u+x -o -name '*.so' \) -print0 |
    sed -z "s|^$root||" |
    { xargs -0 ldd 2>/dev/null || true; } |
    awk '/=> \// { print $3 } /^\t\/[^ ]+ \(/ { print $1 }' |
    sort -u |
    while read -r lib; do
        [ -e "$root$lib" ] || { mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"; }
    done

missing=$(find "$root$pglib" -type f -name '*.so' -exec ldd {} + 2>/dev/null | grep 'not found' | sort -u || true)
[ -z "$missing" ] || echo "build.sh: warning: libraries not on this host (those modules will not load): $missing" >&2

# busybox: /bin/sh and the few tools the entry point uses.
cp /bin/busybox "$root/bin/busybox"
for applet in sh awk cat chmod echo env kill ls mkdir ps rm sleep; do
    ln -s busybox "$root/bin/$applet"
done

cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/bin/sh
postgres:x:999:999:PostgreSQL:/tmp:/bin/sh
P
cat >"$root/etc/group" <<'G'
root:x:0:
postgres:x:999:
G
chown -R 999:999 "$root/var/run/postgresql"
install -m 0755 "$here/entry.sh" "$root/usr/local/bin/openshell-postgres-entry"
cp "$here/Containerfile" "$ctx/Containerfile"

podman build --quiet --layers=false --label "org.openshell.inputs=$inputs" -t "$image" -f "$ctx/Containerfile" "$ctx" >/dev/null
# Drop the image this build replaced, if nothing uses it.
podman image prune -f --filter "label=org.openshell.inputs" >/dev/null 2>&1 || true
echo "build.sh: built $image ($(podman image inspect --format '{{.Size}}' "$image") bytes)" >&2
