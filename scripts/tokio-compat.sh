#!/usr/bin/env bash
# Proves that an application on the newest tokio 1.x can add dsipc-tokio (issue 23: a
# `tokio = ">=1.38, <1.39"` requirement made every current application fail to resolve).
#
# In a new cargo project under the cargo target directory (from `cargo metadata`), with no
# lockfile and cargo's default resolution for an edition-2021 application:
# 1. `tokio = "1"` alone: the lockfile cargo writes holds the newest tokio 1.x;
# 2. dsipc-tokio added (by path): `cargo build` must keep that tokio (a requirement with an
#    upper bound would move it down), and the program runs: a tokio UnixListener that closes
#    each connection, and dsipc-tokio's DiagnosticsClient asking it for ProcessInfo, which
#    must end in dsipc's typed error (a closed connection), on that tokio.
#
# Needs crates.io. The project has its own target directory inside it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { echo "tokio-compat: $*"; }
die() { echo "tokio-compat: error: $*" >&2; exit 1; }

# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/target-dir.sh"
TARGET_DIR="$(cargo_target_dir "$(dirname "${BASH_SOURCE[0]}")/..")"
APP="$TARGET_DIR/tokio-compat"
rm -rf "$APP/src" "$APP/Cargo.toml" "$APP/Cargo.lock"
mkdir -p "$APP/src"
cd "$APP"
# An application's own settings: cargo's default for edition 2021 (newest versions, whatever
# their rust-version), not this repository's .cargo/config.toml (the project sits under it);
# its own target directory, whatever CARGO_TARGET_DIR says.
export CARGO_RESOLVER_INCOMPATIBLE_RUST_VERSIONS=allow
export CARGO_TARGET_DIR="$APP/target"

manifest() {
    cat >Cargo.toml <<EOF
[package]
name = "dsipc-tokio-compat"
version = "0.0.0"
edition = "2021"
publish = false

# Its own workspace, not the repository's.
[workspace]

[dependencies]
tokio = { version = "1", features = ["rt", "net"] }
$1
EOF
}
tokio_version() { cargo pkgid -q tokio | sed 's/.*[@#]//'; }

# 1. The newest tokio 1.x, as an application's lockfile has it.
manifest ""
echo 'fn main() {}' >src/main.rs
cargo generate-lockfile -q
newest="$(tokio_version)"
log "an application on tokio alone locks tokio $newest"

# 2. dsipc-tokio added.
manifest "dsipc-tokio = { path = \"$ROOT/adapters/tokio\" }"
cat >src/main.rs <<'EOF'
//! dsipc-tokio on the application's tokio: a ProcessInfo request to a socket whose server
//! closes every connection at once must end in dsipc's typed error, not a hang or a panic.
use std::time::Duration;

fn main() {
    let dir = std::env::temp_dir().join(format!("dsipc-tokio-compat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the socket's folder");
    let socket = dir.join("closing.sock");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let answer = runtime.block_on(async {
        let listener = tokio::net::UnixListener::bind(&socket).expect("bind");
        tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                drop(conn);
            }
        });
        dsipc_tokio::DiagnosticsClient::new(dsipc_tokio::Endpoint::new(&socket))
            .with_timeout(Duration::from_secs(10))
            .process_info()
            .await
    });
    let _ = std::fs::remove_dir_all(&dir);
    match answer {
        Err(e @ dsipc_tokio::Error::Timeout { .. }) => {
            eprintln!("timed out instead of seeing the closed connection: {}", e);
            std::process::exit(1);
        }
        Err(e) => println!("dsipc-tokio's client, server closed the connection: {}", e),
        Ok(info) => {
            eprintln!("a ProcessInfo from a server that sent nothing: {:?}", info);
            std::process::exit(1);
        }
    }
}
EOF
t0=$(date +%s)
cargo build -q
built="$(tokio_version)"
log "with dsipc-tokio: tokio $built (built in $(( $(date +%s) - t0 ))s)"
[ "$built" = "$newest" ] \
    || die "adding dsipc-tokio moved tokio from $newest to $built: a dsipc crate bounds tokio"
case "$built" in
    1.38.*) die "tokio $built: the newest 1.x should be later than 1.38 (no crates.io?)" ;;
esac
"$CARGO_TARGET_DIR/debug/dsipc-tokio-compat"
log "dsipc-tokio builds and runs on tokio $built, the newest 1.x"
