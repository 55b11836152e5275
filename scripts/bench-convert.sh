#!/usr/bin/env bash
# Figures for `dsipc convert --format folded` (or $FORMAT), whole process, release build: wall time
# (median and best of N runs) and peak RSS (/usr/bin/time -v) on the project's own recorded
# traces (tests/data/nettrace) and, where ../shared is beside the clone, the public PerfView
# sample traces (../shared/data/nettrace, unzipped into target/nettrace-samples; a clone
# without them says it skipped them). A benchmark: it prints figures and fails only when a
# run fails, never on a missed target.
#
#   scripts/bench-convert.sh [RUNS]     (default 20 runs per file)
#   BIN=/path/to/old/dsipc scripts/bench-convert.sh    time another build (a before run)
#   FORMAT=jsonl scripts/bench-convert.sh     another output format (default folded)
#
# Targets (issue 10): HeartRateMonitor (30 MB, 32-bit) <= 50 ms and <= 64 MiB peak RSS;
# the .NET Core 3.0 sample (4.8 MB) <= 12 ms.
set -euo pipefail
[ -n "${EPOCHREALTIME:-}" ] || { echo "bench-convert: needs bash >= 5 (EPOCHREALTIME)" >&2; exit 1; }
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-20}"
FORMAT="${FORMAT:-folded}"
cd "$ROOT"

shared=""
for d in "${DSIPC_SHARED:-}" "$ROOT/../shared" "$ROOT/../../shared"; do
    if [ -n "$d" ] && [ -d "$d/data/nettrace" ]; then shared="$d"; break; fi
done
[ -x /usr/bin/time ] || { echo "bench-convert: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }

if [ -z "${BIN:-}" ]; then
    cargo build --release -q -p dsipc-cli
    # shellcheck source=scripts/target-dir.sh
    . "$ROOT/scripts/target-dir.sh"
    BIN="$(cargo_target_dir "$ROOT")/release/dsipc"
fi
SAMPLES="$ROOT/target/nettrace-samples"
mkdir -p "$SAMPLES"

files=()
for rt in net8.0.4 netcore3.1.23; do
    f="$SAMPLES/regex-$rt.nettrace"
    [ -f "$f" ] || gzip -dc "tests/data/nettrace/regex-$rt.nettrace.gz" > "$f"
    files+=("$f" "tests/data/nettrace/$rt-busy.nettrace")
done
if [ -n "$shared" ]; then
    for name in HeartRateMonitor.10068.nettrace eventpipe-dotnetcore3.0-win-x64-objver4.nettrace; do
        f="$SAMPLES/$name"
        [ -f "$f" ] || unzip -q -o "$shared/data/nettrace/$name.zip" -d "$SAMPLES"
        files+=("$f")
    done
else
    echo "bench-convert: SKIPPED the PerfView samples (HeartRateMonitor 30 MB, .NET Core 3.0 4.8 MB): no shared/data/nettrace beside this clone (set DSIPC_SHARED)"
fi

for f in "${files[@]}"; do
    name=$(basename "$f")
    # Warm the page cache, check the run succeeds.
    "$BIN" convert "$f" --format "$FORMAT" -o /dev/null 2>/dev/null
    times=()
    for _ in $(seq "$RUNS"); do
        # Bash's own clock (no process of its own): timing with two `date` spawns added
        # about 1.5 ms of their own to every run. What is timed is the whole dsipc process:
        # fork, exec, the conversion, exit and wait.
        t0=${EPOCHREALTIME/[.,]/}
        "$BIN" convert "$f" --format "$FORMAT" -o /dev/null 2>/dev/null
        t1=${EPOCHREALTIME/[.,]/}
        times+=($(( t1 - t0 )))
    done
    sorted=$(printf '%s\n' "${times[@]}" | sort -n)
    best=$(echo "$sorted" | head -n1)
    median=$(echo "$sorted" | sed -n "$(( (RUNS + 1) / 2 ))p")
    rss=$(/usr/bin/time -v "$BIN" convert "$f" --format "$FORMAT" -o /dev/null 2>&1 >/dev/null \
        | awk -F: '/Maximum resident set size/ {gsub(/ /, "", $2); print $2}')
    awk -v n="$name" -v size="$(stat -c %s "$f")" -v med="$median" -v best="$best" -v rss="$rss" -v runs="$RUNS" \
        'BEGIN { printf "%-55s %10d bytes  median %7.1f ms  best %7.1f ms  peak RSS %6.1f MiB  (%d runs)\n", n, size, med / 1000, best / 1000, rss / 1024, runs }'
done
