#!/usr/bin/env bash
# The audit chain's cost per admission (sql/audit.sql's audit_log_z_link trigger): backend CPU
# per admit_child spread across 32 trees, with the chain's trigger disabled (the floor: what
# admission cost before the chain) and enabled, alternating twice in one sitting, each beside
# its bare-insert floor (scripts/bench-admission-cpu.sh).
#
#   scripts/bench-audit-chain.sh SUPERUSER_URL_OF_A_MIGRATED_DATABASE [N]
#
# e.g. BENCH_KEEP_DB=1 cargo bench -p openshell-store --bench admission --profile dev prints
# "database kept: URL". The script copies that database; it never changes it.
set -euo pipefail
url=${1:?usage: $0 SUPERUSER_DATABASE_URL [N]}
n=${2:-3000}
here=$(dirname "$0")
server=${url%/*}
template=${url##*/}
off="audit_chain_off_$$"
psql -X -q "$server/postgres" -c "CREATE DATABASE $off TEMPLATE $template"
trap 'psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS $off" >/dev/null' EXIT
psql -X -q "$server/$off" -c "ALTER TABLE audit_log DISABLE TRIGGER audit_log_z_link"
per() { "$here/bench-admission-cpu.sh" "$1" "$n" | tee -a /dev/stderr | sed -E 's/.*admission: ([0-9.]+) ms.*/\1/'; }
a1=$(per "$server/$off" 2>&1 | tail -1); b1=$(per "$url" 2>&1 | tail -1)
a2=$(per "$server/$off" 2>&1 | tail -1); b2=$(per "$url" 2>&1 | tail -1)
awk -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" 'BEGIN {
  a = (a1 + a2) / 2; b = (b1 + b2) / 2;
  printf "backend CPU per admission: chain off (floor) %.3f ms, chain on %.3f ms: %.3fx (%+.1f%%)\n", a, b, b / a, (b / a - 1) * 100 }'
