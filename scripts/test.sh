#!/usr/bin/env bash
# The project's whole test suite, from a fresh machine: installs what it needs (Debian
# packages, a Python venv with real .NET 8.0.4 and .NET Core 3.1.23 runtimes, the egress
# peers (Azurite, moto), cargo tools),
# then runs lints, every Rust test (including interop against the real runtimes), the
# published packages' contents (cargo package), dsipc-tokio on the newest tokio, dsipc
# serve's API against dotnet-monitor's openapi.json (schemathesis), the
# Rust 1.63 build, the Windows build and tests under wine, and bounded fuzzing.
#
#   scripts/test.sh            everything (what CI runs)
#   SKIP_WINDOWS=1 ...         skip the Windows/wine and Rust 1.63 part (local iterations)
#   SKIP_FUZZ=1 ...            skip the fuzzing part
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n==== %s (%ds)\n' "$*" "$SECONDS"; }

step "real .NET runtimes (PyPI)"
scripts/setup-runtimes.sh
# shellcheck disable=SC1091
set -a; . target/dotnet-venv/dsipc-runtimes.env; set +a

# Debian packages go through sudo unless already root (the same rule everywhere).
SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
step "tools the tests run (go tool pprof, unzip; curl, serve's HTTP client; tmux, an 80x24 terminal)"
if ! command -v go >/dev/null || ! command -v unzip >/dev/null || ! command -v curl >/dev/null \
    || ! command -v tmux >/dev/null; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go unzip curl tmux
fi
step "Prometheus (Debian package; the counters export tests start a real server and promtool)"
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
    $SUDO apt-get update -q
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus
fi

step "PerfView sample traces (../shared/data/nettrace)"
rm -f target/skipped-tests.txt
SHARED_DIR=""
for d in "${DSIPC_SHARED:-}" "$ROOT/../shared" "$ROOT/../../shared"; do
    if [ -n "$d" ] && [ -d "$d/data/nettrace" ]; then SHARED_DIR="$d"; break; fi
done
if [ -n "$SHARED_DIR" ]; then
    echo "found in $SHARED_DIR: the tests that read them run (a missing one fails)"
    export DSIPC_REQUIRE_SHARED=1
else
    echo "absent (a user's clone): the tests that need them print SKIPPED lines and are listed at the end"
fi

step "egress peers: Azurite (npm), moto's S3 server, boto3 and azure-storage-blob (PyPI)"
# serve/tests/egress.rs starts them and reads back with their clients; here a missing peer
# fails those tests instead of skipping them.
scripts/egress-peers.sh
export DSIPC_REQUIRE_EGRESS_PEERS=1

step "lints (fmt, clippy, doc)"
scripts/lint.sh fmt clippy core doc fuzz msrv
# Every script finds build output where cargo puts it (scripts/target-dir.sh: cargo
# metadata's target_directory), so a CARGO_TARGET_DIR of one's own works. The check: the
# nostd gate, the one that runs binaries it built by their path, with CARGO_TARGET_DIR
# pointing elsewhere. It is the cheapest honest one: nostd-check/ is the core alone, and its
# gate runs here instead of in the step above (no extra build in CI); the same with the
# workspace would rebuild everything. (The runtimes' venv stays in target/dotnet-venv, where
# setup-runtimes.sh puts it and its env file says: it is not cargo's output.)
step "lints: nostd-check/ with CARGO_TARGET_DIR elsewhere (scripts honour it)"
ALT_TARGET="$(mktemp -d)"
CARGO_TARGET_DIR="$ALT_TARGET" scripts/lint.sh nostd
rm -rf "$ALT_TARGET"

step "cargo test (core, adapters, CLI, real-runtime interop)"
cargo test --workspace
step "examples/custom_loop.rs (the session layer in a poll(2) loop) against real .NET 8 and Core 3.1"
scripts/example-custom-loop.sh
step "dsipc monitor without dsipc-mio (the thread-per-connection monitor Windows uses)"
cargo test -p dsipc-cli --no-default-features --test monitor
step "dsipc-serve without TLS (feature tls off): https:// egress endpoints are a typed error"
cargo test -p dsipc-serve --no-default-features --lib egress
step "cargo package of every library crate (none ships tests/data, scripts/, .ci/, fuzz/, windows/)"
scripts/package-check.sh
step "dsipc-tokio in a new project on the newest tokio 1.x"
scripts/tokio-compat.sh
step "dsipc serve's API against dotnet-monitor's openapi.json (schemathesis, bounded)"
scripts/api-conformance.sh

if [ "${SKIP_WINDOWS:-0}" != 1 ]; then
    step "Rust 1.63 and Windows toolchain (Debian)"
    scripts/install-windows-toolchain.sh
    step "Rust 1.63 build of the core (Linux)"
    scripts/msrv.sh
    step "Rust 1.63 build of the std adapter and the testkit (Linux), CLI check (windows-gnu)"
    scripts/msrv-std.sh
    step "Windows build, tests under wine64"
    scripts/build-windows.sh
fi

if [ "${SKIP_FUZZ:-0}" != 1 ] && [ -x scripts/fuzz-ci.sh ]; then
    step "fuzzing (bounded)"
    scripts/fuzz-ci.sh
fi

if [ -s target/skipped-tests.txt ]; then
    step "skipped (no ../shared/data/nettrace beside this clone)"
    sort -u target/skipped-tests.txt
fi
step "all green"
