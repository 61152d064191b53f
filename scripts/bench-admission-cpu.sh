#!/usr/bin/env bash
# Backend CPU per admission, beside the CPU of a bare insert in the same session: the cost
# the database pays for one admit_child, without the noise of a shared machine's wall clock
# (CPU time still grows a little under load: compare runs made close together).
#
#   BENCH_KEEP_DB=1 cargo bench -p openshell-store --bench admission --profile dev   # prints "database kept: URL"
#   scripts/bench-admission-cpu.sh URL [N]
#
# URL names a migrated database (the admission bench's kept one); the script copies it
# (CREATE DATABASE ... TEMPLATE), makes 32 roots with large grants, and runs N (default 3000)
# admissions over them as the admin user, each its own SERIALIZABLE transaction through a
# prepared admit_child, then N single-row inserts; it reads the backend's utime+stime from
# /proc, so it must run on the database's host (pg_backend_pid must be visible here).
set -euo pipefail
url=${1:?usage: $0 DATABASE_URL [N]}
n=${2:-3000}
template=${url##*/}
server=${url%/*}
copy="admission_cpu_$$"
psql -X -q "$server/postgres" -c "CREATE DATABASE $copy TEMPLATE $template"
trap 'psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS $copy" >/dev/null' EXIT
db="$server/$copy"
psql -X -q -v ON_ERROR_STOP=1 "$db" -f "$(dirname "$0")/bench-roots.sql"
out=$(mktemp -d)
{
  echo "SET default_transaction_isolation = serializable;"
  echo "PREPARE a(int, text) AS SELECT sandbox_id FROM admit_child(p_caller => ROW((SELECT min(id) FROM users WHERE is_admin), NULL, NULL)::os_caller, p_parent => 'cpu-' || \$1, p_name => \$2, p_kind => 'agent', p_command => ARRAY['sleep', '600'], p_policy => '{\"version\": 1}'::jsonb, p_policy_hash => sha256('p'::bytea), p_proof => ROW((SELECT id FROM cpu_roots WHERE n = \$1), 1, 0, 'inherited')::os_admission_proof, p_credential_hash => sha256(\$2::bytea), p_request_id => 'req-' || \$2, p_args_hash => sha256('x'::bytea), p_runner => 'bench-null', p_template => NULL);"
  echo "PREPARE f AS INSERT INTO cpu_floor (id, payload) VALUES (gen_random_uuid(), sha256(gen_random_uuid()::text::bytea));"
  for i in $(seq 1 100); do echo "EXECUTE a($((i % 32)), 'warm-$i'); EXECUTE f;"; done
  echo "SELECT pg_backend_pid() AS pid \\gset"
  echo "\\setenv BENCH_PID :pid"
  echo "\\! awk '{print \$14 + \$15}' /proc/\$BENCH_PID/stat > $out/0"
  for i in $(seq 1 "$n"); do echo "EXECUTE a($((i % 32)), 'c-$i');"; done
  echo "\\! awk '{print \$14 + \$15}' /proc/\$BENCH_PID/stat > $out/1"
  for i in $(seq 1 "$n"); do echo "EXECUTE f;"; done
  echo "\\! awk '{print \$14 + \$15}' /proc/\$BENCH_PID/stat > $out/2"
} | psql -X -q -v ON_ERROR_STOP=1 "$db" >/dev/null
hz=$(getconf CLK_TCK)
read -r t0 <"$out/0"; read -r t1 <"$out/1"; read -r t2 <"$out/2"
rm -rf "$out"
awk -v a=$((t1 - t0)) -v f=$((t2 - t1)) -v n="$n" -v hz="$hz" -v load="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN {
  pa = a * 1000 / hz / n; pf = f * 1000 / hz / n;
  printf "backend CPU per admission: %.3f ms; per bare insert (floor): %.3f ms; ratio %.1fx (%d each, load %s)\n",
         pa, pf, (pf > 0 ? pa / pf : 0), n, load }'
