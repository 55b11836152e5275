#!/usr/bin/env bash
# Draws the pictures README.md shows from real runs: docs/counters-monitor.svg, an 80x24
# terminal (tmux) showing `dsipc counters monitor` of a .NET 8 runtime (host.py
# --counters), as an SVG of its text. (docs/flamegraph-regex.svg comes from the trace
# tests: DSIPC_KEEP_FLAMEGRAPH=docs cargo test -p dsipc-cli --test trace_format.)
#
#   scripts/readme-pictures.sh        # needs scripts/setup-runtimes.sh first, and tmux
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
. target/dotnet-venv/dsipc-runtimes.env
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
cargo build --release -q -p dsipc-cli
DSIPC="$(cargo_target_dir "$ROOT")/release/dsipc"

WORK="$(mktemp -d)"
SOCK="dsipc-pictures-$$"
cleanup() {
    tmux -L "$SOCK" kill-server 2>/dev/null || true
    [ -n "${HOST:-}" ] && kill "$HOST" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

"$DSIPC_PYTHON" tests/runtime/host.py --runtime net8 --counters --meter-rate 50 \
    --max-seconds 120 --ignore-stdin --ready-file "$WORK/ready" >/dev/null 2>&1 &
HOST=$!
for _ in $(seq 600); do [ -s "$WORK/ready" ] && break; sleep 0.1; done
PID="$(sed -n 's/.*pid=\([0-9]*\).*/\1/p' "$WORK/ready")"
[ -n "$PID" ] || { echo "readme-pictures: the host did not start" >&2; exit 1; }

tmux -L "$SOCK" new-session -d -s m -x 80 -y 24 \
    "$DSIPC counters monitor $PID --counters System.Runtime[cpu-usage,working-set,gc-heap-size,alloc-rate,threadpool-thread-count,exception-count],MyMeter"
# Wait for two publications (the Meter's rate needs a full interval).
for _ in $(seq 300); do
    tmux -L "$SOCK" capture-pane -p -t m > "$WORK/screen"
    grep -q "requests" "$WORK/screen" && break
    sleep 0.1
done
sleep 2.5
tmux -L "$SOCK" capture-pane -p -t m > "$WORK/screen"

python3 - "$WORK/screen" docs/counters-monitor.svg <<'PY'
import sys, html
lines = open(sys.argv[1]).read().rstrip("\n").split("\n")
w, h = 80 * 8.4 + 24, len(lines) * 17 + 24
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0f}" height="{h}" '
       f'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="14">',
       f'<rect width="100%" height="100%" rx="6" fill="#1e1e1e"/>']
for i, line in enumerate(lines):
    out.append(f'<text x="12" y="{24 + i * 17}" fill="#d4d4d4" xml:space="preserve">'
               f'{html.escape(line)}</text>')
out.append('</svg>')
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PY
echo "readme-pictures: wrote docs/counters-monitor.svg"
