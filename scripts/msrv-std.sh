#!/usr/bin/env bash
# Proves that the std adapter (adapters/std), the tokio adapter (adapters/tokio), the
# socket-file helpers (adapters/sockfile) and
# the fake runtime (tests/testkit) build with Rust 1.63 for Linux (all targets, tests
# included), and that the CLI (cli/) checks with Rust 1.63 for x86_64-pc-windows-gnu when
# the Windows std is installed: Debian's rustc 1.63 + cargo 1.65
# (scripts/install-windows-toolchain.sh installs them), offline from vendored crates.
#
# The CLI's Linux build is not checked here: on Unix its monitor runs on dsipc-mio (mio 1.x
# needs a newer Rust). Its 1.63 code paths (the thread-per-connection monitor and the rest)
# are compiled for Linux by scripts/msrv.sh (the windows/ workspace builds cli/src as
# dsipc) and for Windows below and by scripts/build-windows.sh.
#
# cargo 1.65 cannot read the root workspace as it is (its dev-dependencies pull crates of
# the 2024 edition), so this copies these crates into target/msrv-ws without the core's
# dev-dependencies and benches and without the CLI's dsipc-mio dependency (and `mio`
# feature), pins the proc-macro crates to versions that support 1.63, and vendors with
# rustup's cargo.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
W="$ROOT/target/msrv-ws"
RUSTC_163=/usr/bin/rustc
CARGO_OLD=/usr/bin/cargo
[ -x "$RUSTC_163" ] && [ -x "$CARGO_OLD" ] \
    || { echo "msrv-std: needs Debian's rustc/cargo (scripts/install-windows-toolchain.sh)" >&2; exit 1; }

rm -rf "$W/src" "$W/adapters" "$W/tests" "$W/cli" "$W/trace"
mkdir -p "$W/adapters" "$W/tests"
cp -r "$ROOT/src" "$W/"
cp -r "$ROOT/adapters/std" "$ROOT/adapters/sockfile" "$ROOT/adapters/tokio" "$W/adapters/"
cp -r "$ROOT/tests/testkit" "$ROOT/tests/common" "$W/tests/"
cp -r "$ROOT/cli" "$ROOT/trace" "$W/"
rm -rf "$W/adapters/std/target" "$W/adapters/sockfile/target" "$W/adapters/tokio/target" "$W/tests/testkit/target" "$W/cli/target" "$W/trace/target"
python3 - "$ROOT/Cargo.toml" "$W/Cargo.toml" <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
for section in (r"\[dev-dependencies\]", r"\[\[bench\]\]", r"\[profile\.bench\]"):
    # Repeat: adjacent sections (several [[bench]]) share the newline between them.
    n = 1
    while n:
        s, n = re.subn(r"\n" + section + r"\n(?:[^\[\n][^\n]*\n|\n)*", "\n", s)
s = re.sub(r"(?m)^members = \[.*\]$", 'members = [".", "trace", "adapters/std", "adapters/sockfile", "adapters/tokio", "tests/testkit", "cli"]', s)
open(sys.argv[2], "w").write(s)
EOF
python3 - "$W/cli/Cargo.toml" <<'EOF'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r"(?m)^dsipc-mio = .*\n", "", s)
s = re.sub(r"\n\[features\]\n(?:[^\[\n][^\n]*\n|\n)*", "\n", s)
open(sys.argv[1], "w").write(s)
EOF
cp "$ROOT/Cargo.lock" "$W/Cargo.lock"
cd "$W"
# Versions known to build with 1.63 (the same as windows/Cargo.lock).
# Each entry: package spec (name@major when several majors are locked), version.
for pin in "proc-macro2 1.0.103" "quote 1.0.41" "syn@2 2.0.106" "unicode-ident 1.0.22" "libc 0.2.177" "anyhow 1.0.99" "backtrace 0.3.69"; do
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
    -p dsipc-trace -p dsipc-std -p dsipc-sockfile -p dsipc-testkit -p dsipc-tokio --all-targets --target "$HOST"
echo "msrv-std: dsipc-trace, dsipc-std, dsipc-sockfile, dsipc-testkit and dsipc-tokio build with Rust 1.63 for $HOST ($(( $(date +%s) - t0 ))s)"
if [ -d /usr/lib/rustlib/x86_64-pc-windows-gnu ]; then
    RUSTC=$RUSTC_163 $CARGO_OLD --config vendor.toml check --offline --locked \
        -p dsipc-std -p dsipc-cli -p dsipc-tokio --target x86_64-pc-windows-gnu
    echo "msrv-std: dsipc-std, dsipc-cli and dsipc-tokio check with Rust 1.63 for x86_64-pc-windows-gnu"
fi
