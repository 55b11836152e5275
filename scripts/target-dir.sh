# shellcheck shell=bash
# Sourced by the scripts: `cargo_target_dir [DIR]` prints the directory cargo puts the build
# output of the workspace at DIR (default: the current directory) in: `cargo metadata`'s
# target_directory, which follows CARGO_TARGET_DIR, `build.target-dir` in a cargo config, or
# else is DIR's workspace root's target/. nostd-check/, fuzz/ and windows/ are workspaces of
# their own: ask with their directory. CARGO (default `cargo`) is the cargo asked.
#
#   . "$ROOT/scripts/target-dir.sh"
#   BIN="$(cargo_target_dir "$ROOT")/release/dsipc"
cargo_target_dir() {
    local meta dir
    meta="$(cd "${1:-.}" && "${CARGO:-cargo}" metadata --format-version 1 --no-deps)" || return 1
    dir="$(sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p' <<<"$meta")"
    [[ -n "$dir" ]] || { echo "cargo_target_dir: no target_directory in cargo metadata" >&2; return 1; }
    printf '%s\n' "$dir"
}
