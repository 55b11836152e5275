#!/usr/bin/env bash
# Runs examples/custom_loop.rs (the session layer driven by a plain poll(2) loop) against a
# real .NET 8 and a real .NET Core 3.1 runtime, and checks what it prints: ProcessInfo on
# .NET 8 (Core 3.1 has none, which the example says), a CollectTracing2 session, and a
# stream that ended Stopped (whole, after our stop) with events in it.
#
#   scripts/example-custom-loop.sh      (after scripts/setup-runtimes.sh)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
set -a; . target/dotnet-venv/dsipc-runtimes.env; set +a

cargo build --quiet --example custom_loop --features alloc
# shellcheck disable=SC1091
. "$ROOT/scripts/target-dir.sh"
BIN="$(cargo_target_dir "$ROOT")/debug/examples/custom_loop"

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

for rt in net8 netcore31; do
    log="$(mktemp)"
    "$DSIPC_PYTHON" tests/runtime/host.py --runtime "$rt" --busy --ignore-stdin --max-seconds 60 >"$log" 2>&1 &
    pids+=("$!")
    for _ in $(seq 600); do grep -q '^READY' "$log" && break; sleep 0.1; done
    pid="$(grep -o '^READY pid=[0-9]*' "$log" | cut -d= -f2)"
    [ -n "$pid" ] || { echo "custom_loop: $rt host did not start"; cat "$log"; exit 1; }
    out="$("$BIN" "$pid")"
    echo "$out" | sed "s/^/  $rt: /"
    if [ "$rt" = net8 ]; then
        echo "$out" | grep -q "^ProcessInfo3 (0x0408) (pid $pid): Linux" || { echo "custom_loop: no ProcessInfo3 on .NET 8"; exit 1; }
    else
        echo "$out" | grep -q "no ProcessInfo (.NET Core 3.x)" || { echo "custom_loop: Core 3.1 not named"; exit 1; }
    fi
    echo "$out" | grep -q "^CollectTracing2 (0x0203): session" || { echo "custom_loop: no session"; exit 1; }
    echo "$out" | grep -Eq '^Stopped \{ bytes: [0-9]+ \}: [0-9]+ bytes, [1-9][0-9]* events$' \
        || { echo "custom_loop: the session did not end Stopped with events"; exit 1; }
done
echo "custom_loop: 2 passed, 0 failed"
