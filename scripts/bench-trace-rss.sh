#!/usr/bin/env bash
# Peak RSS of `dsipc trace PID --format speedscope` (release build, whole process, from
# /usr/bin/time) at two trace lengths against a real .NET runtime busy in Regex
# backtracking (tests/runtime/host.py --regex): the profile is built while the stream
# arrives, so the figure must stay flat as the trace grows. A benchmark: it prints
# figures and fails only when a run fails, never on a missed target.
#
#   scripts/bench-trace-rss.sh [SHORT_S] [LONG_S] [RUNTIME] [MODE]
#   (default 10 30 net8 --regex; MODE --busy gives a busier, larger stream)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SHORT="${1:-10}"
LONG="${2:-30}"
RUNTIME="${3:-net8}"
MODE="${4:---regex}"
cd "$ROOT"
[ -x /usr/bin/time ] || { echo "bench-trace-rss: needs /usr/bin/time (apt-get install time)" >&2; exit 1; }
if [ -z "${DSIPC_PYTHON:-}" ]; then
    set -a; . "$ROOT/target/dotnet-venv/dsipc-runtimes.env"; set +a
fi

cargo build --release -q -p dsipc-cli
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
BIN="$(cargo_target_dir "$ROOT")/release/dsipc"
OUT="$(mktemp -d)"
# The host exits when its stdin closes: keep it open through a coprocess pipe.
coproc HOST { exec "$DSIPC_PYTHON" "$ROOT/tests/runtime/host.py" --runtime "$RUNTIME" "$MODE" \
    --max-seconds $(( SHORT + LONG + 120 )) 2>"$OUT/host.log"; }
trap 'kill "$HOST_PID" 2>/dev/null || true; rm -rf "$OUT"' EXIT
read -r ready <&"${HOST[0]}"
pid="$(sed -n 's/^READY pid=\([0-9]*\).*/\1/p' <<<"$ready")"
[ -n "$pid" ] || { echo "bench-trace-rss: no READY line: $ready" >&2; cat "$OUT/host.log" >&2; exit 1; }
echo "runtime: $ready"
for secs in "$SHORT" "$LONG"; do
    /usr/bin/time -f "%M" -o "$OUT/rss" "$BIN" trace "$pid" --duration "$secs" \
        --format speedscope -o "$OUT/t$secs.nettrace" >/dev/null 2>"$OUT/err"
    rss_kib="$(tail -n1 "$OUT/rss")"
    size="$(stat -c %s "$OUT/t$secs.nettrace")"
    line="$(grep '^dsipc: received' "$OUT/err")"
    prof="$(grep '^dsipc: wrote' "$OUT/err")"
    printf 'trace %3s s: %8.2f MiB trace, peak RSS %6.1f MiB\n    %s\n    %s\n' \
        "$secs" "$(echo "$size / 1048576" | bc -l)" "$(echo "$rss_kib / 1024" | bc -l)" "$line" "$prof"
done
