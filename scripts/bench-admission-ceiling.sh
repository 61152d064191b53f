#!/usr/bin/env bash
# How far admission is from the cost of its own writes: pgbench runs, in turns on one copy of
# a migrated database, with the same clients and isolation (SERIALIZABLE),
#
#   floor      one bare single-row insert a transaction (the admission bench's floor);
#   raw        the rows one admission writes, as one plain statement into copies of the
#              tables with the same columns, defaults and indexes but no CHECK, foreign key,
#              trigger or function: the parent locked FOR SHARE, its tree's and its own
#              counter bumped, the child's row, its first policy, the request-id claim and the
#              audit receipt (what any implementation of the issue's rules has to write);
#   admit      admit_child itself, on 32 trees, one a client modulo 32;
#
# and prints each rate and its ratio to the floor of the same round. raw is a ceiling: the
# share of the gap between admit and raw is what the rules (triggers, checks, PL/pgSQL) cost.
#
#   BENCH_KEEP_DB=1 cargo bench -p openshell-store --bench admission   # prints "database kept: URL"
#   scripts/bench-admission-ceiling.sh URL [SECONDS=8] [CLIENTS=32] [ROUNDS=2]
#
# URL names a migrated database with an admin user; the script copies it (CREATE DATABASE ...
# TEMPLATE) and drops the copy at the end. Run it with the server at the durability to measure
# (it prints fsync and synchronous_commit).
set -euo pipefail
url=${1:?usage: $0 DATABASE_URL [SECONDS] [CLIENTS] [ROUNDS]}
secs=${2:-8}
clients=${3:-32}
rounds=${4:-2}
template=${url##*/}
server=${url%/*}
copy="admission_ceiling_$$"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
psql -X -q "$server/postgres" -c "CREATE DATABASE $copy TEMPLATE $template"
trap 'psql -X -q "$server/postgres" -c "DROP DATABASE IF EXISTS $copy" >/dev/null; rm -rf "$work"' EXIT
db="$server/$copy"
psql -X -q -v ON_ERROR_STOP=1 "$db" -f "$here/bench-roots.sql"
psql -X -q -v ON_ERROR_STOP=1 "$db" <<'SQL'
CREATE TABLE raw_sandboxes (LIKE sandboxes INCLUDING DEFAULTS INCLUDING INDEXES);
CREATE TABLE raw_policies (LIKE sandbox_policies INCLUDING DEFAULTS INCLUDING INDEXES);
CREATE TABLE raw_requests (LIKE create_requests INCLUDING DEFAULTS INCLUDING INDEXES);
CREATE TABLE raw_audit (LIKE audit_log INCLUDING DEFAULTS INCLUDING INDEXES INCLUDING IDENTITY);
CREATE TABLE raw_trees (LIKE trees INCLUDING DEFAULTS INCLUDING INDEXES) WITH (fillfactor = 10);
CREATE TABLE raw_parents (LIKE parents INCLUDING DEFAULTS INCLUDING INDEXES) WITH (fillfactor = 50);
INSERT INTO raw_sandboxes SELECT * FROM sandboxes WHERE id IN (SELECT id FROM cpu_roots);
INSERT INTO raw_trees (root_id, live_total, admitted_max_total) SELECT id, 0, 100000 FROM cpu_roots;
VACUUM ANALYZE;
SQL

# The default policy's document, as the gateway stores it for a child that inherits it.
policy='{"process": {"run_as_user": "sandbox", "run_as_group": "sandbox"}, "version": 1, "landlock": {"compatibility": "best_effort"}, "network_policies": {}, "filesystem_policy": {"read_only": [], "read_write": [], "include_workdir": false}}'
cat > "$work/floor.sql" <<'SQL'
INSERT INTO cpu_floor (id, payload) VALUES (gen_random_uuid(), sha256(gen_random_uuid()::text::bytea));
SQL
cat > "$work/admit.sql" <<SQL
\set n :client_id % 32
SELECT sandbox_id FROM admit_child(p_caller => ROW((SELECT min(id) FROM users WHERE is_admin), NULL, NULL)::os_caller, p_parent => 'cpu-' || :n, p_name => 'c-' || :client_id || '-' || txid_current(), p_kind => 'agent', p_command => ARRAY['sleep', '600'], p_policy => '$policy'::jsonb, p_policy_hash => sha256('p'::bytea), p_proof => ROW((SELECT id FROM cpu_roots WHERE n = :n), 1, 0, 'inherited')::os_admission_proof, p_credential_hash => sha256(gen_random_uuid()::text::bytea), p_request_id => 'r-' || :client_id || '-' || txid_current(), p_args_hash => sha256('x'::bytea), p_runner => 'bench-null', p_template => NULL);
SQL
cat > "$work/raw.sql" <<SQL
\set n :client_id % 32
WITH p AS (SELECT s.id, s.root_id, s.owner_id FROM raw_sandboxes s WHERE s.id = (SELECT id FROM cpu_roots WHERE n = :n) FOR SHARE),
t AS (UPDATE raw_trees SET live_total = live_total + 1 WHERE root_id = (SELECT root_id FROM p) AND live_total < admitted_max_total RETURNING live_total),
c AS (INSERT INTO raw_parents AS q (parent_id, live_children) SELECT id, 1 FROM p ON CONFLICT (parent_id) DO UPDATE SET live_children = q.live_children + 1 RETURNING live_children),
s AS (INSERT INTO raw_sandboxes (id, name, owner_id, parent_id, root_id, depth, kind, command, created_by_user, credential_hash, runner)
      SELECT os_new_id(true), 'c-' || :client_id || '-' || txid_current(), p.owner_id, p.id, p.root_id, 1, 'agent', ARRAY['sleep', '600'], p.owner_id, sha256(gen_random_uuid()::text::bytea), 'bench-null' FROM p
      RETURNING id, root_id, parent_id, owner_id, name),
po AS (INSERT INTO raw_policies (sandbox_id, version, document, hash, set_by_user) SELECT id, 1, '$policy'::jsonb, sha256('p'::bytea), owner_id FROM s),
r AS (INSERT INTO raw_requests (caller, request_id, args_hash, sandbox_id) SELECT 'user:' || owner_id, 'r-' || :client_id || '-' || txid_current(), sha256('x'::bytea), id FROM s),
a AS (INSERT INTO raw_audit (action, outcome, actor_user, owner_id, sandbox_id, parent_id, root_id, request_id, details)
      SELECT 'sandbox.create_child', 'admitted', s.owner_id, s.owner_id, s.id, s.parent_id, s.root_id, 'r-' || :client_id || '-' || txid_current(),
             jsonb_build_object('kind', 'agent', 'name', s.name, 'depth', 1, 'verdict', 'inherited', 'grant_id', 1, 'max_depth', 8,
                                'max_total', 100000, 'live_total', (SELECT live_total FROM t), 'max_breadth', 10000,
                                'policy_hash', encode(sha256('p'::bytea), 'hex'), 'live_children', (SELECT live_children FROM c))
      FROM s)
SELECT id FROM s;
SQL

# No sequential scans, as admit_child's own setting: on these small tables the planner would
# scan the raw copies whole, and SSI would then make every insert conflict with every read.
# No JIT, as the gateway's connections.
export PGOPTIONS='-c default_transaction_isolation=serializable -c enable_seqscan=off -c jit=off'
threads=$(( clients < 2 ? 1 : 2 ))
# tps and failed transactions of one pgbench run of a script.
run() {
    local out
    out=$(pgbench -n -M prepared -c "$clients" -j "$threads" -T "$secs" --max-tries=100 -f "$work/$1.sql" "$db" 2>&1) \
        || { echo "$out" >&2; exit 1; }
    awk '/^tps/ {t = $3} /number of transactions retried/ {r = $5} /number of failed transactions/ {f = $5}
         END {printf "%s %s %s\n", t, (r == "" ? 0 : r), (f == "" ? 0 : f)}' <<<"$out"
}
echo "server: fsync=$(psql -X -At "$db" -c 'SHOW fsync'), synchronous_commit=$(psql -X -At "$db" -c 'SHOW synchronous_commit'); $clients clients, $secs s a run"
printf '%-6s %12s %12s %8s %12s %8s %9s\n' round floor/s raw/s raw/fl admit/s adm/fl retried
for round in $(seq 1 "$rounds"); do
    read -r floor _ _ < <(run floor)
    read -r raw _ _ < <(run raw)
    read -r admit retried failed < <(run admit)
    [ "$failed" = 0 ] || echo "admit: $failed transactions failed after 100 tries" >&2
    printf '%-6s %12.0f %12.0f %7.3fx %12.0f %7.3fx %9s\n' "$round" "$floor" "$raw" \
        "$(bc -l <<<"$raw / $floor")" "$admit" "$(bc -l <<<"$admit / $floor")" "$retried"
done
