#!/usr/bin/env bash
# Runs every dsipc fuzz target for a bounded time on stable Rust and fails on any crash.
#
#   scripts/fuzz-ci.sh [TARGET...]        (default: every target of fuzz/Cargo.toml)
#
# Environment:
#   FUZZ_SECONDS    seconds of fuzzing per target (default 30)
#   FUZZ_SECONDS_NETTRACE  seconds for the trace targets (nettrace*, trace_layer, heap_stream,
#                   gcdump; default 20: they reach their
#                   coverage plateau within seconds; keeps their CI cost at ~40 s)
#   FUZZ_TOOLCHAIN  rustup toolchain for the build (default: the active one, stable here;
#                   `-s none` needs no nightly feature, see fuzz/README.md)
#   FUZZ_KEEP=1     keep fuzz/corpus/<target> between runs (default: start each run from the
#                   seeds, so CI is reproducible and the working corpus never grows unbounded)
#
# Per target: 1. replay corpus-seeds/<target> and regressions/<target> once (-runs=0);
# 2. fuzz for FUZZ_SECONDS seeded from them with fuzz/dsipc.dict; 3. print total executions
# and executions per second (libFuzzer's final stat:: lines). A crash, a leak of the time
# limit per input (-timeout) or of memory (-rss_limit_mb) fails the run; the input is left in
# fuzz/artifacts/<target>/ and printed in hex.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FUZZ="$ROOT/fuzz"
SECONDS_PER_TARGET="${FUZZ_SECONDS:-30}"
TC=()
if [[ -n "${FUZZ_TOOLCHAIN:-}" ]]; then TC=("+$FUZZ_TOOLCHAIN"); fi

if ! cargo "${TC[@]}" fuzz --version >/dev/null 2>&1; then
    echo "fuzz-ci: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

cd "$FUZZ"
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
# Where cargo puts fuzz/'s build output (fuzz/ is a workspace of its own).
OUTDIR="$(cargo_target_dir "$FUZZ")"
if [[ $# -gt 0 ]]; then
    TARGETS=("$@")
else
    mapfile -t TARGETS < <(cargo "${TC[@]}" fuzz list)
fi
HOST="$(rustc "${TC[@]}" -vV | sed -n 's/^host: //p')"

t0=$(date +%s)
echo "fuzz-ci: $(cargo "${TC[@]}" fuzz --version), $(rustc "${TC[@]}" --version)"
echo "fuzz-ci: building ${#TARGETS[@]} targets (-s none, release, debug assertions on)"
# One build for all targets (cargo fuzz build takes one target or none).
cargo "${TC[@]}" fuzz build -s none 2>&1 | grep -v '^ *Compiling' || true
for t in "${TARGETS[@]}"; do
    [[ -x "$OUTDIR/$HOST/release/$t" ]] || { echo "fuzz-ci: target $t was not built"; exit 1; }
done
echo "fuzz-ci: build took $(( $(date +%s) - t0 ))s"

LOGS="$FUZZ/target/fuzz-ci-logs"
mkdir -p "$LOGS"
declare -a SUMMARY=()
FAILED=()

report_crash() {
    local t="$1" log="$2"
    echo "fuzz-ci: $t FAILED; last lines of $log:"
    tail -n 40 "$log" | sed 's/^/    /'
    local a
    for a in "$FUZZ/artifacts/$t"/*; do
        [[ -f "$a" ]] || continue
        echo "fuzz-ci: artifact $a ($(stat -c %s "$a") bytes):"
        head -c 512 "$a" | od -An -tx1 | sed 's/^/    /'
    done
}

for t in "${TARGETS[@]}"; do
    bin="$OUTDIR/$HOST/release/$t"
    seeds="corpus-seeds/$t"
    regress="regressions/$t"
    work="corpus/$t"
    mkdir -p "artifacts/$t" "$seeds"
    if [[ "${FUZZ_KEEP:-0}" != 1 ]]; then rm -rf "$work"; fi
    mkdir -p "$work"
    dirs=("$seeds")
    [[ -d "$regress" ]] && dirs+=("$regress")
    common=(-artifact_prefix="artifacts/$t/" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1)

    # 1. Replay the committed inputs once.
    rlog="$LOGS/$t.replay.log"
    if ! "$bin" "${common[@]}" -runs=0 "${dirs[@]}" >"$rlog" 2>&1; then
        report_crash "$t" "$rlog"
        FAILED+=("$t (replay)")
        continue
    fi
    replayed=$(sed -n 's/^stat::number_of_executed_units: *//p' "$rlog" | tail -1)

    # 2. Fuzz, new inputs going to the working corpus (first directory).
    flog="$LOGS/$t.fuzz.log"
    secs="$SECONDS_PER_TARGET"
    case "$t" in nettrace*|trace_layer|heap_stream|gcdump) secs="${FUZZ_SECONDS_NETTRACE:-${FUZZ_SECONDS:-20}}" ;; esac
    if ! "$bin" "${common[@]}" -dict=dsipc.dict -max_total_time="$secs" \
        "$work" "${dirs[@]}" >"$flog" 2>&1; then
        report_crash "$t" "$flog"
        FAILED+=("$t")
        continue
    fi
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$flog" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$flog" | tail -1)
    if [[ -z "$execs" || -z "$rate" ]]; then
        # Fall back to the last "#N DONE ... exec/s: R" line.
        done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$flog" | tail -1 || true)
        execs=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$done_line")
        rate=$(sed -E 's/.*exec\/s: ([0-9]+).*/\1/' <<<"$done_line")
    fi
    cov=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$flog" | tail -1 | sed -E 's/.*cov: ([0-9]+).*/\1/' || true)
    corpus_n=$(find "$work" -type f | wc -l)
    line=$(printf '%-20s %12s execs %9s exec/s  cov %5s  corpus %4s  (replayed %s)' \
        "$t" "$execs" "$rate" "${cov:-?}" "$corpus_n" "${replayed:-?}")
    echo "fuzz-ci: $line"
    SUMMARY+=("$line")
done

echo
echo "fuzz-ci: summary (${SECONDS_PER_TARGET}s per target, total $(( $(date +%s) - t0 ))s)"
for s in "${SUMMARY[@]}"; do echo "  $s"; done
if [[ ${#FAILED[@]} -gt 0 ]]; then
    echo "fuzz-ci: FAILED: ${FAILED[*]}"
    exit 1
fi
echo "fuzz-ci: ${#SUMMARY[@]} targets, no crash"
