#!/usr/bin/env bash
# dsipc serve's figures from `cargo bench -p dsipc-cli --bench serve` (cli/benches/serve.rs),
# built with the release profile (the binary users run; it also shares the build with
# `cargo build --release`). A benchmark: it prints figures and fails only when a build or a
# run fails. The load average is printed beside them (the VM is shared).
#
#   scripts/bench-serve.sh idle [ROUNDS]   peak RSS at start and after 100 requests, and where
#                                          the resident pages are, for this tree and the older
#                                          trees BASES (default "8b97981 a75db21"), alternating,
#                                          ROUNDS rounds (default 3). Each binary is a copy
#                                          of its own whose cached pages are dropped before
#                                          each run (a cold start): how many of the binary's
#                                          pages a process maps depends on how its file came
#                                          into the page cache (a file just written by cp
#                                          or a linker sits in other folios than one read at
#                                          exec), which moved the figures by up to 1 MiB
#   scripts/bench-serve.sh fleet [ROUNDS]  20 real .NET 8 runtimes (scripts/setup-runtimes.sh),
#                                          /metrics scraped every second and a 30 s CPU trace
#                                          streaming: serve's peak RSS and CPU, for this tree and
#                                          BASES, alternating, ROUNDS rounds (default 1)
#   scripts/bench-serve.sh throughput [ROUNDS]
#                                          a 1 GiB stream through GET /trace and through
#                                          `dsipc trace -o FILE` (5 runs each, medians), for this
#                                          tree and BASES, alternating, ROUNDS rounds (default 1)
#   scripts/bench-serve.sh egress          serve egressing a 1 GiB trace to a folder, to moto
#                                          and to Azurite (scripts/egress-peers.sh installs
#                                          them): time, MiB/s, serve's peak RSS
#   scripts/bench-serve.sh rules [SECONDS] 20 real .NET 8 runtimes (scripts/setup-runtimes.sh)
#                                          with 3 collection rules each for SECONDS (default
#                                          600): serve's CPU and peak RSS. Never in CI.
#
# The older trees are temporary `git worktree`s under the target directory, each built with a
# profile of its own (`baseCOMMIT`, the release settings: the workspace's crates of two
# checkouts must not share a profile's directory, as cargo names them alike and would take
# one tree's build for the other's); their binaries are kept as bench-serve/dsipc-COMMIT,
# so a second run builds nothing for them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
TARGET="$(cargo_target_dir "$ROOT")"
WHAT="${1:-idle}"
OUT="$TARGET/bench-serve"
mkdir -p "$OUT"

bench_bin() { # builds the serve bench (and this tree's dsipc) in release; prints the bench
    CARGO_TARGET_DIR="$TARGET" cargo bench -q -p dsipc-cli --bench serve --profile release \
        --no-run --message-format=json | grep '"kind":\["bench"\]' |
        sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1
}

base_bin() { # COMMIT: the release dsipc of that commit (built once); prints its path
    local commit tree
    commit="$(git rev-parse --short=12 "$1^{commit}")"
    if [ ! -x "$OUT/dsipc-$commit" ]; then
        tree="$OUT/tree-$commit"
        rm -rf "$tree"
        git worktree add -q --detach "$tree" "$commit"
        (cd "$tree" && CARGO_TARGET_DIR="$TARGET" cargo build -q -p dsipc-cli --bin dsipc \
            --profile "base$commit" --config "profile.base$commit.inherits=\"release\"") >&2
        cp "$TARGET/base$commit/dsipc" "$OUT/dsipc-$commit"
        git worktree remove --force "$tree"
    fi
    printf '%s\n' "$OUT/dsipc-$commit"
}

load() { echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"; }

case "$WHAT" in
idle | fleet | throughput)
    if [ "$WHAT" = idle ]; then ROUNDS="${2:-3}"; else ROUNDS="${2:-1}"; fi
    if [ "$WHAT" = fleet ]; then
        set -a
        # shellcheck disable=SC1091
        . "$TARGET/dotnet-venv/dsipc-runtimes.env"
        set +a
    fi
    names=() bins=()
    for b in ${BASES:-8b97981 a75db21}; do
        names+=("$b") bins+=("$(base_bin "$b")")
    done
    bench="$(bench_bin)"
    cp "$TARGET/release/dsipc" "$OUT/dsipc-this"
    names+=("this tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ', changed'))")
    bins+=("$OUT/dsipc-this")
    load
    for r in $(seq 1 "$ROUNDS"); do
        echo "round $r"
        for i in "${!bins[@]}"; do
            echo "  ${names[$i]}: binary $(stat -c %s "${bins[$i]}") bytes"
            sync "${bins[$i]}" # written back, so that its cached pages can be dropped:
            dd if="${bins[$i]}" iflag=nocache count=0 status=none
            DSIPC_BIN="${bins[$i]}" "$bench" "$WHAT" | sed 's/^/    /'
        done
    done
    load
    ;;
egress | rules)
    bench="$(bench_bin)"
    if [ "$WHAT" = rules ]; then export DSIPC_BENCH_SECONDS="${2:-600}"; fi
    set -a
    # shellcheck disable=SC1090
    for env in "$TARGET/egress-peers/egress-peers.env" "$TARGET/dotnet-venv/dsipc-runtimes.env"; do
        if [ -f "$env" ]; then . "$env"; fi
    done
    set +a
    "$bench" "$WHAT"
    ;;
*)
    echo "usage: $0 idle|fleet|throughput [ROUNDS] | egress | rules [SECONDS]" >&2
    exit 2
    ;;
esac
