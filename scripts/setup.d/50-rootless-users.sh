#!/usr/bin/env bash
# A non-root gateway's sandboxes (crates/isolation/src/userns.rs) and its tests (tests/e2e/rootless*.rs):
# newuidmap/newgidmap (package uidmap, in 10-apt.sh), and three system users: `openshell-rootless`
# with 65536 subordinate uids and gids for its sandboxes, `openshell-undelegated` with as many
# (the refusal tests take its cgroup delegation away while `openshell-rootless`'s sandboxes
# run), and `openshell-nosubid` with none (its gateway must refuse every create). The tests
# delegate cgroups to them themselves, as root.
# Fixed uids that no image the tests run uses (the test PostgreSQL image runs as 999).
set -euo pipefail
for spec in openshell-rootless:64990 openshell-nosubid:64991 openshell-undelegated:64992; do
    u=${spec%%:*} want=${spec#*:}
    if id -u "$u" >/dev/null 2>&1 && [ "$(id -u "$u")" != "$want" ]; then
        userdel "$u"
    fi
    id -u "$u" >/dev/null 2>&1 ||
        useradd --system --uid "$want" --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$u"
done
for f in /etc/subuid /etc/subgid; do
    touch "$f"
    grep -q '^openshell-rootless:' "$f" || echo "openshell-rootless:1000000000:65536" >>"$f"
    grep -q '^openshell-undelegated:' "$f" || echo "openshell-undelegated:1000065536:65536" >>"$f"
    sed -i '/^openshell-nosubid:/d' "$f"
done
