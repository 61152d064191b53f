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
# REF is checked out in a temporary git worktree (removed at exit) and built in a target
# directory of its own that is kept between runs (target/bench-prover-before): cargo names a
# path package's artifacts and records its sources relative to the workspace, so one shared
# target directory would take one tree's build for the other's. Release builds; run it on a
# quiet machine for figures to quote.
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
cd "$root"
if [[ "${1:-}" != "--before" ]]; then
  exec cargo bench -p openshell-prover -- "$@"
fi
ref=${2:?usage: $0 [--before REF] [FILTER]}
filter=${3:-}
rounds=${ROUNDS:-3}
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

# Builds the shape bench of the tree at $1 in the target directory $3 and copies its
# executable to $out/$2.
build() {
  local exe
  exe=$(CARGO_TARGET_DIR="$3" cargo bench --manifest-path "$1/Cargo.toml" -p openshell-prover --bench prover \
    --no-run 2>&1 | tee "$out/build.log" | sed -n 's/.*Executable benches\/prover.rs (\(.*\))/\1/p' | tail -1)
  # Cargo prints the executable relative to the working directory or absolute.
  if [[ -n "$exe" && -x "$root/$exe" ]]; then exe="$root/$exe"; fi
  if [[ ! -x "$exe" ]]; then
    cat "$out/build.log" >&2
    echo "could not build the bench of $1" >&2
    exit 1
  fi
  cp "$exe" "$out/$2"
}
build "$root" bench-after "$root/target"
build "$wt" bench-before "$root/target/bench-prover-before"
after="$out/bench-after"
before="$out/bench-before"

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
    END { for (i = 1; i <= k; i++) { l = order[i]; printf "%s\t%.6f\t%.6f\n", l, b50[l], b99[l] } }'
}
best before >"$out/before.best"
best after >"$out/after.best"
echo
echo "before: $ref ($(git rev-parse --short "$ref")), after: this tree; best of $rounds rounds each, ms;"
echo "/floor: the row over its size's equal pair (floor) in the same build's runs; a/b: after over before"
printf '%-38s %9s %9s %7s %7s   %9s %9s %7s %7s   %7s %7s\n' row "before p50" p99 /floor "" "after p50" p99 /floor "" "a/b p50" p99
awk -F'\t' '
  # The floor of a row: its size'"'"'s equal pair ("50 rules, ..." -> "50 rules, equal pair (floor)").
  function floor_of(label) { return substr(label, 1, index(label, ",")) " equal pair (floor)" }
  function ratio(x, f) {
    if (f <= 0) return sprintf("%7s", "-")
    return sprintf(x / f < 0.001 ? "%6.0ex" : x / f < 0.01 ? "%6.4fx" : "%6.2fx", x / f)
  }
  # Under 10 us (a cache hit), nanoseconds show.
  function num(x) { return sprintf(x < 0.01 ? "%.6f" : "%.4f", x) }
  NR == FNR { b50[$1] = $2; b99[$1] = $3; next }
  { a50[$1] = $2; a99[$1] = $3; order[++k] = $1 }
  END {
    for (i = 1; i <= k; i++) {
      l = order[i]; f = floor_of(l)
      af = sprintf("%s %s", ratio(a50[l], a50[f]), ratio(a99[l], a99[f]))
      if (l in b50) {
        bf = sprintf("%s %s", ratio(b50[l], b50[f]), ratio(b99[l], b99[f]))
        printf "%-38s %9s %9s %s   %9s %9s %s   %s %s\n", l, num(b50[l]), num(b99[l]), bf, num(a50[l]), num(a99[l]), af, ratio(a50[l], b50[l]), ratio(a99[l], b99[l])
      } else {
        printf "%-38s %9s %9s %7s %7s   %9s %9s %s\n", l, "-", "-", "", "", num(a50[l]), num(a99[l]), af
      }
    }
  }' "$out/before.best" "$out/after.best"
