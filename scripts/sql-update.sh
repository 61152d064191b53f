#!/usr/bin/env bash
# After editing a file in sql/ (or adding one to sql/revision's list): records every file's
# checksum in sql/revision, raising its revision by one when any changed, then regenerates
# sql/schema.sql from a freshly migrated database (the store's definitions test, in its
# writing mode; it needs the test server, as the tests do). See docs/sql.md.
#
# SQL_UPDATE_SCHEMA=0 skips the schema (only the revision).
set -euo pipefail
cd "$(dirname "$0")/.."
manifest=sql/revision
revision=$(awk '$1 == "revision" { print $2 }' "$manifest")
[ -n "$revision" ] || { echo "sql-update: no 'revision N' line in $manifest" >&2; exit 1; }
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
changed=0
while read -r name sum; do
    case "$name" in ''|'#'*|revision) continue ;; esac
    [ -f "sql/$name" ] || { echo "sql-update: $manifest lists sql/$name, which does not exist" >&2; exit 1; }
    now=$(sha256sum "sql/$name" | cut -d' ' -f1)
    [ "$now" = "$sum" ] || changed=1
    printf '%-20s %s\n' "$name" "$now" >>"$tmp"
done <"$manifest"
for f in sql/*.sql; do
    name=$(basename "$f")
    [ "$name" = schema.sql ] && continue
    grep -q "^$name " "$tmp" || { echo "sql-update: sql/$name is not in $manifest: add its name where it applies in order" >&2; exit 1; }
done
if [ "$changed" = 1 ]; then
    revision=$((revision + 1))
    echo "sql-update: the definitions changed: revision $revision" >&2
fi
{
    sed -n '/^#/p' "$manifest"
    echo "revision $revision"
    cat "$tmp"
} >"$manifest.new"
mv "$manifest.new" "$manifest"
if [ "${SQL_UPDATE_SCHEMA:-1}" != 0 ]; then
    if [ -z "${OPENSHELL_TEST_DATABASE_URL:-}" ] && [ -z "${DOCKER_HOST:-}" ]; then
        export DOCKER_HOST=unix:///run/openshell-podman.sock
    fi
    OPENSHELL_WRITE_SCHEMA=1 cargo test -q -p openshell-store --test definitions -- schema_sql
fi
