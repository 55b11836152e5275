#!/usr/bin/env bash
# Wall time of `dsipc stack PID` (release build, whole process: connect, session, stop,
# rundown, analysis, output) against an idle real .NET runtime (tests/runtime/host.py
# --sleeping-thread: a thread parked in Thread.Sleep, the rest idle). Target: <= 1 s. A
# benchmark: it prints figures and fails only when a run fails, never on a missed target.
#
#   scripts/bench-stack.sh [RUNS] [RUNTIME]   (default 10 net8; RUNTIME netcore31 too)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RUNS="${1:-10}"
RUNTIME="${2:-net8}"
cd "$ROOT"
if [ -z "${DSIPC_PYTHON:-}" ]; then
    set -a; . "$ROOT/target/dotnet-venv/dsipc-runtimes.env"; set +a
fi

cargo build --release -q -p dsipc-cli
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
BIN="$(cargo_target_dir "$ROOT")/release/dsipc"
OUT="$(mktemp -d)"
# The host exits when its stdin closes: keep it open through a coprocess pipe.
coproc HOST { exec "$DSIPC_PYTHON" "$ROOT/tests/runtime/host.py" --runtime "$RUNTIME" \
    --sleeping-thread --max-seconds $(( RUNS * 10 + 120 )) 2>"$OUT/host.log"; }
trap 'kill "$HOST_PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT
read -r ready <&"${HOST[0]}"
pid="$(sed -n 's/^READY pid=\([0-9]*\).*/\1/p' <<<"$ready")"
[ -n "$pid" ] || { echo "bench-stack: no READY line: $ready" >&2; cat "$OUT/host.log" >&2; exit 1; }
echo "runtime: $ready"
for i in $(seq "$RUNS"); do
    t0=$(date +%s%N)
    "$BIN" stack "$pid" >"$OUT/out" 2>"$OUT/err" || { cat "$OUT/err" >&2; exit 1; }
    t1=$(date +%s%N)
    echo $(( (t1 - t0) / 1000 )) >>"$OUT/us"
done
threads="$(grep -c '^Thread (0x' "$OUT/out")"
frames="$(grep -c '^  ' "$OUT/out")"
sort -n "$OUT/us" | awk -v runs="$RUNS" -v th="$threads" -v fr="$frames" '
    { v[NR] = $1 }
    END {
        printf "dsipc stack (%d runs, last: %d threads, %d frames): min %.3f s, median %.3f s, max %.3f s (target <= 1 s)\n",
            runs, th, fr, v[1] / 1e6, v[int((NR + 1) / 2)] / 1e6, v[NR] / 1e6
    }'
