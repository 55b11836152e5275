#!/usr/bin/env bash
# Proves that the std adapter (adapters/std), the tokio adapter (adapters/tokio), the
# socket-file helpers (adapters/platform), the fake runtime (tests/testkit), dsipc-recipes (recipes/), the CLI
# (cli/, `serve` included) and dsipc-serve (serve/, with its default `tls`: rustls and
# ring) build with Rust 1.63 for Linux (all targets, tests included), and that the CLI
# and dsipc-serve check with Rust 1.63 for
# x86_64-pc-windows-gnu when the Windows std is installed: Debian's rustc 1.63 + cargo 1.65
# (scripts/install-windows-toolchain.sh installs them), offline from vendored crates.
#
# The CLI is built here without its `mio` feature (on Unix its default monitor runs on
# dsipc-mio, and mio 1.x needs a newer Rust: without it the monitor serves each connection
# on its own thread, as on Windows) and without `pprof` (prost needs a newer Rust); with
# `flamegraph` (inferno 0.11.19 builds with 1.63 at the versions pinned below).
#
# cargo 1.65 cannot read the root workspace as it is (its dev-dependencies pull crates of
# the 2024 edition), so this copies these crates into msrv-ws (in the cargo target
# directory, from `cargo metadata`) without the core's dev-dependencies, examples and benches and
# without the CLI's dsipc-mio dependency (and `mio` feature; of its default features only
# `flamegraph`), pins the proc-macro crates and the crates below to versions that support
# 1.63 (tokio among them: the manifests give lower bounds only), and vendors with rustup's
# cargo. The workspace's manifests inherit [workspace.package] and [workspace.dependencies]
# from the copied root manifest (cargo 1.64 and later read them).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
. "$ROOT/scripts/target-dir.sh"
TARGET_DIR="$(cargo_target_dir "$ROOT")"
W="$TARGET_DIR/msrv-ws"
RUSTC_163=/usr/bin/rustc
CARGO_OLD=/usr/bin/cargo
[ -x "$RUSTC_163" ] && [ -x "$CARGO_OLD" ] \
    || { echo "msrv-std: needs Debian's rustc/cargo (scripts/install-windows-toolchain.sh)" >&2; exit 1; }

rm -rf "$W/src" "$W/adapters" "$W/tests" "$W/cli" "$W/trace" "$W/recipes" "$W/serve"
mkdir -p "$W/adapters" "$W/tests"
cp -r "$ROOT/src" "$W/"
cp -r "$ROOT/adapters/std" "$ROOT/adapters/platform" "$ROOT/adapters/tokio" "$W/adapters/"
# tests/data: the CLI's tests include captures from it.
cp -r "$ROOT/tests/testkit" "$ROOT/tests/common" "$ROOT/tests/data" "$W/tests/"
cp -r "$ROOT/cli" "$ROOT/trace" "$ROOT/recipes" "$ROOT/serve" "$W/"
rm -rf "$W/adapters/std/target" "$W/adapters/platform/target" "$W/adapters/tokio/target" "$W/tests/testkit/target" "$W/cli/target" "$W/trace/target" "$W/recipes/target" "$W/serve/target"
python3 - "$ROOT/Cargo.toml" "$W/Cargo.toml" <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
for section in (r"\[dev-dependencies\]", r"\[target\.'cfg\(unix\)'\.dev-dependencies\]",
                r"\[\[example\]\]", r"\[\[bench\]\]", r"\[profile\.bench\]"):
    # Repeat: adjacent sections (several [[bench]]) share the newline between them.
    n = 1
    while n:
        s, n = re.subn(r"\n" + section + r"\n(?:[^\[\n][^\n]*\n|\n)*", "\n", s)
s = re.sub(r"(?m)^members = \[.*\]$", 'members = [".", "trace", "adapters/std", "adapters/platform", "adapters/tokio", "tests/testkit", "recipes", "serve", "cli"]', s)
open(sys.argv[2], "w").write(s)
EOF
python3 - "$W/cli/Cargo.toml" <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r"(?m)^dsipc-mio = .*\n", "", s)
s, n = re.subn(r"(?m)^mio = .*\n", "", s)
assert n == 1, "cli/Cargo.toml: no `mio` feature to remove"
s, n = re.subn(r"(?m)^default = \[.*\]$", 'default = ["flamegraph"]', s)
assert n == 1, "cli/Cargo.toml: no default features to replace"
open(sys.argv[1], "w").write(s)
EOF
cp "$ROOT/Cargo.lock" "$W/Cargo.lock"
cd "$W"
# Versions known to build with 1.63 (the same as windows/Cargo.lock).
# Each entry: package spec (name@major when several majors are locked), version.
# For `serve` (the newest versions whose rust-version is at most 1.63, as cargo's
# fallback resolver picks them for windows/Cargo.lock): hyper-util 0.1.19 (0.1.21 is
# edition 2024, rust-version 1.85), serde_json 1.0.145 (1.0.154 wants 1.71), itoa 1.0.15
# (serde_json's and http's; 1.0.18 wants 1.68), ryu 1.0.20 (serde_json 1.0.145's; 1.0.23
# wants 1.71), serde 1.0.228 (and serde_core, serde_derive: serde_derive 1.0.229 wants 1.71
# and syn 3; the root lock holds 1.0.228 already, pinned here too). hyper 1.x, http 1.x, http-body(-util),
# bytes, sha2 0.10 and getrandom 0.2 build with 1.63 as the root lock has them. tokio:
# 1.38.2, the last line whose rust-version is 1.63; the manifests ask for "1.38" (no upper
# bound, so that applications keep their newer tokio): the version is held here and in the
# lockfiles, so it is pinned explicitly rather than left to whatever the copy holds.
# For dsipc-trace's flamegraph: inferno 0.11.19 (0.11.20 on declare rust-version 1.71),
# ahash 0.8.11 (0.8.12 needs getrandom 0.3), is-terminal 0.4.13 (0.4.17 needs windows-sys
# 0.60), rgb 0.8.50 (0.8.51 wants 1.64), once_cell 1.20.3 (1.21 wants 1.65), log 0.4.28
# (0.4.35 wants 1.71).
for pin in "proc-macro2 1.0.103" "quote 1.0.41" "syn@2 2.0.106" "unicode-ident 1.0.22" "libc 0.2.177" "anyhow 1.0.99" "backtrace 0.3.69" \
    "hyper-util 0.1.19" "serde_json 1.0.145" "itoa 1.0.15" "ryu 1.0.20" "serde 1.0.228" "tokio 1.38.2" \
    "inferno 0.11.19" "ahash 0.8.11" "is-terminal 0.4.13" "rgb 0.8.50" "once_cell 1.20.3" "log 0.4.28"; do
    set -- $pin
    cargo update -q -p "$1" --precise "$2"
done
sed -i 's/^version = 4$/version = 3/' Cargo.lock
cargo vendor -q --versioned-dirs vendor > /dev/null
cat > vendor.toml <<EOF
[source.crates-io]
replace-with = "vendored-sources"
[source.vendored-sources]
directory = "$W/vendor"
EOF

HOST="$($RUSTC_163 -vV | sed -n 's/^host: //p')"
echo "msrv-std: $($RUSTC_163 --version), $($CARGO_OLD --version)"
t0=$(date +%s)
RUSTC=$RUSTC_163 $CARGO_OLD --config vendor.toml build --offline --locked \
    -p dsipc-trace -p dsipc-std -p dsipc-platform -p dsipc-testkit -p dsipc-tokio -p dsipc-recipes -p dsipc-serve -p dsipc-cli --all-targets --target "$HOST"
echo "msrv-std: dsipc-trace, dsipc-std, dsipc-platform, dsipc-testkit, dsipc-tokio, dsipc-recipes, dsipc-serve and dsipc-cli build with Rust 1.63 for $HOST ($(( $(date +%s) - t0 ))s)"
if [ -d /usr/lib/rustlib/x86_64-pc-windows-gnu ]; then
    RUSTC=$RUSTC_163 $CARGO_OLD --config vendor.toml check --offline --locked \
        -p dsipc-std -p dsipc-cli -p dsipc-tokio -p dsipc-serve --target x86_64-pc-windows-gnu
    echo "msrv-std: dsipc-std, dsipc-cli, dsipc-tokio and dsipc-serve check with Rust 1.63 for x86_64-pc-windows-gnu"
fi
