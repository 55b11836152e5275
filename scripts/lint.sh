#!/usr/bin/env bash
# Lint gates for CI: formatting, clippy with warnings denied, rustdoc with warnings denied,
# the fuzz crate (fuzz/), the no_std/no-alloc binary (nostd-check/) and the Rust 1.63 build.
# Every gate runs; the script fails at the end if any failed, naming them.
#
#   scripts/lint.sh            every gate
#   scripts/lint.sh GATE...    these gates only: fmt, clippy, core, doc, fuzz, nostd, msrv
#
# Build output is looked for where cargo puts it (CARGO_TARGET_DIR and the like are honoured:
# scripts/target-dir.sh).
#
# Environment: LINT_SKIP_MSRV=1 skips scripts/msrv.sh (run only when Debian's Rust 1.63,
# from scripts/install-windows-toolchain.sh, is installed).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck source=scripts/target-dir.sh
. "$ROOT/scripts/target-dir.sh"
t0=$(date +%s)
FAILED=()
WANTED=("$@")
for w in "${WANTED[@]}"; do
    case "$w" in
        fmt | clippy | core | doc | fuzz | nostd | msrv) ;;
        *) echo "lint: unknown gate '$w' (fmt, clippy, core, doc, fuzz, nostd, msrv)" >&2; exit 2 ;;
    esac
done

# wanted KEY: true when KEY's gate is to run (all of them without arguments).
wanted() {
    [[ ${#WANTED[@]} -eq 0 ]] && return 0
    local w
    for w in "${WANTED[@]}"; do [[ "$w" == "$1" ]] && return 0; done
    return 1
}

# gate KEY NAME COMMAND...: unless KEY is left out, runs COMMAND (in a subshell, with -e),
# records a failure.
gate() {
    wanted "$1" || return 0
    local name="$2"
    shift 2
    echo
    echo "lint: $name"
    local s=$(date +%s)
    if (set -e; "$@"); then
        echo "lint: $name: ok ($(( $(date +%s) - s ))s)"
    else
        echo "lint: $name: FAILED"
        FAILED+=("$name")
    fi
}

fmt_all() {
    cargo fmt --all --check
    (cd fuzz && cargo fmt --check)
    (cd nostd-check && cargo fmt --check)
}

fuzz_crate() {
    cd fuzz
    cargo clippy --all-targets -- -D warnings
    # The harness over corpus-seeds/ and regressions/, without libFuzzer.
    cargo test --quiet
}

nostd() {
    cd nostd-check
    local out
    out="$(cargo_target_dir .)/x86_64-unknown-linux-gnu"
    local bin="$out/release/dsipc-nostd-check"
    cargo clippy --all-targets -- -D warnings
    cargo build --release
    # Statically linked against nothing: no dynamic section, no undefined symbol.
    if readelf -d "$bin" | grep -q 'Dynamic section'; then
        echo "lint: $bin has a dynamic section"
        return 1
    fi
    local undefined
    undefined="$(nm -u "$bin")"
    if [[ -n "$undefined" ]]; then
        echo "lint: $bin has undefined symbols:"
        echo "$undefined"
        return 1
    fi
    "$bin"
    # The dev profile (debug assertions, overflow checks) links and runs too.
    cargo build
    "$out/debug/dsipc-nostd-check"
    # defmt: every log statement of the core compiled in (DEFMT_LOG=trace), stub logger.
    DEFMT_LOG=trace cargo clippy --all-targets --features defmt -- -D warnings
    DEFMT_LOG=trace cargo build --release --features defmt
    "$bin"
}

gate fmt "cargo fmt --check (workspace, fuzz/, nostd-check/)" fmt_all
gate clippy "cargo clippy --workspace --all-targets -D warnings" \
    cargo clippy --workspace --all-targets -- -D warnings
# Each feature alone on top of no_std (no default features), then all of them.
core_features() {
    cargo clippy -p dsipc --lib --no-default-features -- -D warnings
    local f
    for f in defmt arbitrary; do
        echo "lint: --no-default-features --features $f"
        cargo clippy -p dsipc --lib --no-default-features --features "$f" -- -D warnings
    done
}
gate core "cargo clippy on the core: no_std alone and with each feature" core_features
gate core "cargo clippy on the core: all features" \
    cargo clippy -p dsipc --lib --all-features -- -D warnings
gate doc "cargo doc --workspace --no-deps (RUSTDOCFLAGS=-D warnings)" \
    env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
# Private items too: a maintainer's `cargo doc --document-private-items` stays clean.
gate doc "cargo doc --workspace --no-deps --document-private-items (RUSTDOCFLAGS=-D warnings)" \
    env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --document-private-items
gate fuzz "fuzz/: clippy, harness over seeds and regressions" fuzz_crate
gate nostd "nostd-check/: #![no_std] #![no_main], panic=abort, no allocator, no libc; defmt" nostd
# scripts/msrv.sh needs Debian's rustc 1.63 (scripts/install-windows-toolchain.sh installs
# it; scripts/test.sh runs msrv.sh itself after that step).
if [[ -x scripts/msrv.sh && "${LINT_SKIP_MSRV:-0}" != 1 ]] && wanted msrv; then
    if /usr/bin/rustc --version 2>/dev/null | grep -q '^rustc 1\.63\.'; then
        gate msrv "scripts/msrv.sh (the core with Rust 1.63)" scripts/msrv.sh
    else
        echo
        echo "lint: scripts/msrv.sh skipped: no Rust 1.63 at /usr/bin/rustc yet" \
            "(scripts/install-windows-toolchain.sh installs it)"
    fi
fi

echo
if [[ ${#FAILED[@]} -gt 0 ]]; then
    echo "lint: FAILED ($(( $(date +%s) - t0 ))s):"
    printf '  %s\n' "${FAILED[@]}"
    exit 1
fi
echo "lint: all gates passed ($(( $(date +%s) - t0 ))s)"
