#!/usr/bin/env bash
# The prover benches, and with --before REF a before/after table from one sitting: the shape
# bench (crates/prover/benches/prover.rs, which only uses API older provers have) built
# against this tree's prover and against REF's, run alternately ROUNDS times under the same
# machine load, each row's best p50 and p99 kept per build.
#
#   scripts/bench-prover.sh                        # cargo bench -p openshell-prover (both benches)
#   scripts/bench-prover.sh --before main          # + the table against main's prover
#   ROUNDS=5 scripts/bench-prover.sh --before REF [FILTER]
#
# REF is checked out in a temporary git worktree (removed at exit) that shares this tree's
# target directory, so only the prover crate builds twice. Release builds; run it on a quiet
# machine for figures to quote.
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"
if [[ "${1:-}" != "--before" ]]; then
  exec cargo bench -p openshell-prover -- "$@"
fi
ref=${2:?usage: $0 [--before REF] [FILTER]}
filter=${3:-}
rounds=${ROUNDS:-3}
export CARGO_TARGET_DIR="$root/target"
# The z3 library this tree's .cargo/config.toml points at (the worktree has no .deps).
export Z3_LIBRARY_PATH_OVERRIDE="$root/.deps/z3/z3/lib"

wt=$(mktemp -d /tmp/prover-before.XXXXXX)
out=$(mktemp -d /tmp/prover-bench.XXXXXX)
cleanup() {
  git worktree remove --force "$wt" >/dev/null 2>&1 || rm -rf "$wt"
  rm -rf "$out"
}
trap cleanup EXIT
git worktree add --detach -q "$wt" "$ref"
rm -f "$wt/crates/prover/benches/prover.rs"
cp -r crates/prover/benches/prover.rs crates/prover/benches/common "$wt/crates/prover/benches/"

# Builds the shape bench of the tree at $1 and prints its executable's path.
build() {
  cargo bench --manifest-path "$1/Cargo.toml" -p openshell-prover --bench prover --no-run 2>&1 |
    tee "$out/build.log" | sed -n 's/.*Executable benches\/prover.rs (\(.*\))/\1/p' | tail -1
}
# Cargo prints the executable relative to the working directory or absolute.
resolve() { if [[ -n "$1" && -x "$root/$1" ]]; then echo "$root/$1"; else echo "$1"; fi; }
after=$(resolve "$(build "$root")")
before=$(resolve "$(build "$wt")")
if [[ ! -x "$after" || ! -x "$before" ]]; then
  cat "$out/build.log" >&2
  echo "could not build both benches (after: '$after', before: '$before')" >&2
  exit 1
fi

for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds" >&2
  "$after" $filter >"$out/after.$r"
  "$before" $filter >"$out/before.$r"
done

# Rows are "label p50 p99 ...", the label padded to 40 columns (benches/common/mod.rs); a
# time of 1,000 ms or more leaves one space before the next column, so split by position.
best() {
  cat "$out/$1".* | awk '
    /^row / { next }
    {
      label = substr($0, 1, 40); sub(/ +$/, "", label)
      split(substr($0, 41), f); p50 = f[1] + 0; p99 = f[2] + 0
      if (!(label in b50) || p50 < b50[label]) b50[label] = p50
      if (!(label in b99) || p99 < b99[label]) b99[label] = p99
      if (!(label in seen)) { seen[label] = ++k; order[k] = label }
    }
    END { for (i = 1; i <= k; i++) { l = order[i]; printf "%s\t%.3f\t%.3f\n", l, b50[l], b99[l] } }'
}
best before >"$out/before.best"
best after >"$out/after.best"
echo
echo "before: $ref ($(git rev-parse --short "$ref")), after: this tree; best of $rounds rounds each, ms"
printf '%-40s %10s %10s   %10s %10s   %8s %8s\n' row "before p50" "p99" "after p50" "p99" "p50 x" "p99 x"
awk -F'\t' 'NR == FNR { b50[$1] = $2; b99[$1] = $3; next }
  {
    if ($1 in b50) printf "%-40s %10.3f %10.3f   %10.3f %10.3f   %7.2fx %7.2fx\n", $1, b50[$1], b99[$1], $2, $3, $2 / b50[$1], $3 / b99[$1]
    else printf "%-40s %10s %10s   %10.3f %10.3f\n", $1, "-", "-", $2, $3
  }' "$out/before.best" "$out/after.best"
