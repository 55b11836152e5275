#!/usr/bin/env bash
# Peak RSS of `dsipc report FILE` (release build, whole process, from /usr/bin/time) on the
# hostile traces of many distinct stacks (trace/tests/hostile_inputs.rs writes them: 12,000
# stacks of 100 addresses none shares, 1.4 million stacks of two addresses, and 1,000
# stacks each sampled once on each of 2,000 threads: 2 million thread-stack counters, as
# managed samples and as samples of a kind no runtime writes), against
# the trace layer's bound of 64 MiB plus twice the input. A benchmark: it prints figures
# and fails only when a run fails, never on a missed target (the heap bound itself is
# checked by many_distinct_stacks_stay_bounded).
#
#   scripts/bench-report-rss.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
[ -x /usr/bin/time ] || { echo "bench-report-rss: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"

cargo build --release -q -p dsipc-cli
BIN="$(cargo_target_dir "$ROOT")/release/dsipc"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
DSIPC_HOSTILE_OUT="$OUT" cargo test --release -q -p dsipc-trace --test hostile_inputs \
    -- --ignored --exact write_many_distinct_stacks_files >/dev/null

printf '%-24s %10s %12s %12s\n' "trace" "input MB" "peak RSS MiB" "bound MiB"
for f in "$OUT"/*.nettrace; do
    size=$(stat -c %s "$f")
    /usr/bin/time -v "$BIN" report "$f" >/dev/null 2>"$OUT/time.log" \
        || { cat "$OUT/time.log" >&2; exit 1; }
    kib=$(sed -n 's/^\s*Maximum resident set size (kbytes): //p' "$OUT/time.log")
    awk -v n="$(basename "$f" .nettrace)" -v s="$size" -v k="$kib" 'BEGIN {
        printf "%-24s %10.1f %12.1f %12.1f\n", n, s / 1e6, k / 1024, 64 + 2 * s / 1048576 }'
done
