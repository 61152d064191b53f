#!/usr/bin/env bash
# z3 >= 4.13 for the policy prover: the official `z3-solver` wheel from PyPI, unpacked into
# .deps/z3 (ignored by git; cargo links it via .cargo/config.toml), and its libz3.so.5.4
# installed into /usr/local/lib so every binary and test finds it at run time.
# Idempotent; run as root on Debian 12. Keep Z3_VERSION in step with .cargo/config.toml.
set -euo pipefail
Z3_VERSION=5.4.1
WHEEL_VERSION=$Z3_VERSION.0
repo=${OPENSHELL_REPO:-$(cd "$(dirname "$0")/../.." && pwd)}
dest=$repo/.deps/z3
lib=$dest/z3/lib/libz3.so
soname=libz3.so.${Z3_VERSION%.*}

if [ ! -f "$lib" ] || [ ! -d "$dest/z3_solver-$WHEEL_VERSION.dist-info" ]; then
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-pip
    fi
    rm -rf "$dest"
    # --only-binary: never fall back to building z3 from source (hours).
    # PIP_BREAK_SYSTEM_PACKAGES: Debian's pip guards its system site; --target does not touch it.
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check \
        --no-deps --only-binary=:all: --target "$dest" "z3-solver==$WHEEL_VERSION"
fi
[ -f "$lib" ] || { echo "30-z3: $lib missing after installing z3-solver $WHEEL_VERSION" >&2; exit 1; }

if ! cmp -s "$lib" "/usr/local/lib/$soname"; then
    install -m 0755 "$lib" "/usr/local/lib/$soname"
fi
if ! ldconfig -p | grep -q "$soname .*/usr/local/lib/$soname"; then
    ldconfig
fi
echo "30-z3: z3 $Z3_VERSION in $dest, run-time library /usr/local/lib/$soname" >&2
