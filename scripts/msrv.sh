#!/usr/bin/env bash
# Proves the 1.63 build on the Linux host: builds the windows/ workspace (the core and the
# Windows test crate, all targets, with dsipc from cli/src and its `serve` feature) with
# Debian's rustc 1.63 and cargo 1.65, offline, from the crates vendored by
# scripts/build-windows.sh --vendor-only.
#
# Needs scripts/install-windows-toolchain.sh first and rustup's cargo on PATH (for vendoring).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/build-windows.sh" --vendor-only

cd "$ROOT/windows"
HOST="$(/usr/bin/rustc -vV | sed -n 's/^host: //p')"
echo "msrv: $(/usr/bin/rustc --version), $(/usr/bin/cargo --version): build --target $HOST"
t0=$(date +%s)
RUSTC=/usr/bin/rustc /usr/bin/cargo --config "$ROOT/windows/target/vendor-source.toml" \
    build --offline --locked --target "$HOST" --all-targets
echo "msrv: the core builds with Rust 1.63 for $HOST ($(( $(date +%s) - t0 ))s)"
