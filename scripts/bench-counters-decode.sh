#!/usr/bin/env bash
# Counter samples decoded per second on one core from the recorded counters sessions of
# tests/data/counters: this tree's `Decoder` and `TraceDispatcher` + `CounterSink`
# (`cargo bench -p dsipc-trace --bench counters_decode / counters_sinks`) beside an older
# tree's `Decoder` (the same counters_decode bench file built there), alternating. A
# benchmark: it prints figures and fails only when a build or run fails.
#
#   scripts/bench-counters-decode.sh [SECONDS] [ROUNDS]   (default 2 s per figure, 3 rounds)
#   BASE=COMMIT scripts/bench-counters-decode.sh           the older tree (default 5ad7568,
#                                                           the tree before issue 24's sinks)
#   OLD_TREE=DIR scripts/bench-counters-decode.sh          a checkout of it you made (kept;
#                                                           built into DIR/target)
#
# The older tree is a temporary `git worktree` (removed at the end) with its own target
# directory under this tree's target/. Target (issue 24): at least 3x the older Decoder.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECS="${1:-2}"
ROUNDS="${2:-3}"
BASE="${BASE:-5ad7568}"
cd "$ROOT"
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
TARGET="$(cargo_target_dir "$ROOT")"

bench_bin() { # DIR TARGET NAME: builds the bench NAME of the workspace at DIR, prints its path
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench -q -p dsipc-trace --bench "$3" --no-run --message-format=json) \
        | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}

new_decode="$(bench_bin "$ROOT" "$TARGET" counters_decode)"
new_sinks="$(bench_bin "$ROOT" "$TARGET" counters_sinks)"

if [ -n "${OLD_TREE:-}" ]; then
    tree="$OLD_TREE"
    old_target="$OLD_TREE/target"
else
    tree="$TARGET/bench-counters-base/tree"
    old_target="$TARGET/bench-counters-base/target"
    rm -rf "$tree"
    git worktree add -q --detach "$tree" "$BASE"
    trap 'git -C "$ROOT" worktree remove --force "$tree"' EXIT
fi
mkdir -p "$tree/trace/benches"
cp trace/benches/counters_decode.rs "$tree/trace/benches/"
cp tests/data/counters/*.nettrace "$tree/tests/data/counters/"
grep -q 'name = "counters_decode"' "$tree/trace/Cargo.toml" ||
    printf '\n[[bench]]\nname = "counters_decode"\nharness = false\n' >> "$tree/trace/Cargo.toml"
old_decode="$(bench_bin "$tree" "$old_target" counters_decode)"

echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r"
    printf '  %s: ' "$BASE"; "$old_decode" "$SECS"
    printf '  this tree: '; "$new_decode" "$SECS"
    printf '  this tree: '; "$new_sinks" "$SECS" SeriesSamples | grep -v 'each pass'
done
echo "one stream, counters and a profile (this tree):"
"$new_sinks" "$SECS" profile
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
