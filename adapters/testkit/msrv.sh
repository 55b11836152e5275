#!/usr/bin/env bash
# Proves that dsipc-testkit builds (all targets, tests included) with Rust 1.63: Debian's
# rustc 1.63 + cargo 1.65 (scripts/install-windows-toolchain.sh installs them), offline
# from vendored crates. Same approach as scripts/msrv-std.sh: copy the core, dsipc-std (a
# dependency) and the testkit into target/msrv-testkit without the core's dev-dependencies
# and benches (cargo 1.65 cannot read them), pin crates to versions that support 1.63,
# vendor with rustup's cargo, build with the old toolchain.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
W="$ROOT/target/msrv-testkit"
RUSTC_163=/usr/bin/rustc
CARGO_OLD=/usr/bin/cargo
[ -x "$RUSTC_163" ] && [ -x "$CARGO_OLD" ] \
    || { echo "testkit msrv: needs Debian's rustc/cargo (scripts/install-windows-toolchain.sh)" >&2; exit 1; }

rm -rf "$W/src" "$W/adapters"
mkdir -p "$W/adapters"
cp -r "$ROOT/src" "$W/"
cp -r "$ROOT/adapters/std" "$ROOT/adapters/testkit" "$W/adapters/"
rm -rf "$W/adapters/std/target" "$W/adapters/testkit/target"
python3 - "$ROOT/Cargo.toml" "$W/Cargo.toml" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
for section in (r"\[dev-dependencies\]", r"\[\[bench\]\]", r"\[profile\.bench\]"):
    s = re.sub(r"\n" + section + r"\n(?:[^\[\n][^\n]*\n|\n)*", "\n", s)
s = re.sub(r"members = \[[^\]]*\]", 'members = [".", "adapters/std", "adapters/testkit"]', s)
open(sys.argv[2], "w").write(s)
PY
cp "$ROOT/Cargo.lock" "$W/Cargo.lock"
cd "$W"
for pin in "proc-macro2 1.0.103" "quote 1.0.41" "syn@2 2.0.106" "unicode-ident 1.0.22" "libc 0.2.177"; do
    set -- $pin
    cargo update -q -p "$1" --precise "$2" 2>/dev/null || true
done
sed -i 's/^version = 4$/version = 3/' Cargo.lock
cargo vendor -q --versioned-dirs vendor > /dev/null
cat > vendor.toml <<VEOF
[source.crates-io]
replace-with = "vendored-sources"
[source.vendored-sources]
directory = "$W/vendor"
VEOF
HOST="$($RUSTC_163 -vV | sed -n 's/^host: //p')"
echo "testkit msrv: $($RUSTC_163 --version), $($CARGO_OLD --version)"
RUSTC=$RUSTC_163 $CARGO_OLD --config vendor.toml build --offline --locked \
    -p dsipc-testkit --all-targets --target "$HOST"
echo "testkit msrv: dsipc-testkit builds with Rust 1.63 for $HOST"
