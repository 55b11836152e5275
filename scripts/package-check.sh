#!/usr/bin/env bash
# Packages every library crate of the workspace as `cargo publish` would, and checks what
# each .crate holds.
#
# 1. `cargo package` for every package cargo may publish (no `publish = false`: today dsipc,
#    dsipc-trace, dsipc-platform, dsipc-std, dsipc-tokio, dsipc-mio) in one run: cargo
#    packages the workspace's path dependencies together and verifies each .crate (builds it
#    from its unpacked sources) against the ones just packaged, not against crates.io.
# 2. Lists each .crate's files (tar) and fails if any holds the repository's test data
#    (tests/data), scripts/, .ci/, fuzz/ or windows/.
#
#   scripts/package-check.sh                    package, verify, check the contents
#   PACKAGE_CHECK_NO_VERIFY=1 scripts/...       package and check without building (quick)
#
# Needs crates.io (the verification resolves the packaged manifests' dependencies there).
# Paths come from `cargo metadata` (target_directory), never a hard-coded target/.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

log() { echo "package-check: $*"; }
die() { echo "package-check: error: $*" >&2; exit 1; }

META="$(cargo metadata --format-version 1 --no-deps)"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/target-dir.sh"
TARGET_DIR="$(cargo_target_dir)"
# name version, one line per publishable package (`publish` is null unless restricted).
mapfile -t PACKAGES < <(python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p["publish"] is None:
        print(p["name"], p["version"])
' <<<"$META")
[ "${#PACKAGES[@]}" -gt 0 ] || die "no publishable package in the workspace"

args=()
for entry in "${PACKAGES[@]}"; do
    set -- $entry
    args+=(-p "$1")
done
# A fresh target directory for each run: cargo verifies the packages through a local
# registry in it and extracts their sources under $CARGO_HOME/registry/src/<that registry's
# hash>, reusing an extraction of the same name and version. A second run in the same
# directory would then build the previous run's sources. The fresh directory (and the
# extraction cargo made for it, nothing else) is removed at the end.
CARGO_HOME_DIR="${CARGO_HOME:-$HOME/.cargo}"
before="$(ls -d "$CARGO_HOME_DIR"/registry/src/-* 2>/dev/null || true)"
PKG_TARGET="$TARGET_DIR/package-check.$$"
cleanup() {
    rm -rf "$PKG_TARGET"
    local d
    for d in $(ls -d "$CARGO_HOME_DIR"/registry/src/-* 2>/dev/null || true); do
        grep -qxF "$d" <<<"$before" || rm -rf "$d"
    done
}
trap cleanup EXIT
export CARGO_TARGET_DIR="$PKG_TARGET"

verify=()
[ "${PACKAGE_CHECK_NO_VERIFY:-0}" = 1 ] && verify=(--no-verify)

t0=$(date +%s)
log "cargo package ${args[*]} ${verify[*]}"
# --allow-dirty: this checks what the packages hold and that they build, also on a tree
# with uncommitted changes; publishing itself is done from a clean, tagged tree.
cargo package --allow-dirty "${verify[@]}" "${args[@]}"
log "packaged ${#PACKAGES[@]} crates in $(( $(date +%s) - t0 ))s"

# Anything under these top-level folders, and test data anywhere, is never shipped.
FORBIDDEN='^[^/]+/(tests/data|scripts|\.ci|fuzz|windows)(/|$)|/tests/data(/|$)'
bad=0
for entry in "${PACKAGES[@]}"; do
    set -- $entry
    crate="$PKG_TARGET/package/$1-$2.crate"
    [ -f "$crate" ] || die "$crate was not written"
    files="$(tar tzf "$crate")"
    log "$1-$2.crate: $(wc -l <<<"$files") files, $(stat -c %s "$crate") bytes"
    sed 's/^/    /' <<<"$files"
    if hits="$(grep -E "$FORBIDDEN" <<<"$files")"; then
        echo "package-check: $1-$2.crate holds what it must not ship:" >&2
        sed 's/^/    /' <<<"$hits" | head -n 20 >&2
        bad=1
    fi
done
[ "$bad" = 0 ] || die "a package holds tests/data, scripts/, .ci/, fuzz/ or windows/ (see its manifest's include list)"
log "every package holds only its sources, README and examples"
