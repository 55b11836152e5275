#!/usr/bin/env bash
# Installs what the Windows build (windows/ workspace, scripts/build-windows.sh) and the
# Rust 1.63 MSRV check (scripts/msrv.sh) need, from Debian's packages only:
#   /usr/bin/rustc 1.63 + /usr/bin/cargo 1.65, the Linux and x86_64-pc-windows-gnu std,
#   the mingw-w64 linker, and wine64 to run the test executables.
# rustup's toolchain stays first on PATH; the scripts call the Debian tools by full path.
#
# Idempotent: exits at once when every package is already installed.
set -euo pipefail

PACKAGES=(
    rustc                      # Debian's rustc 1.63 (/usr/bin/rustc)
    cargo                      # Debian's cargo 1.65 (/usr/bin/cargo)
    libstd-rust-dev            # std for x86_64-unknown-linux-gnu (host builds, build scripts, proc macros)
    libstd-rust-dev-windows    # std for x86_64-pc-windows-gnu
    gcc-mingw-w64-x86-64       # x86_64-w64-mingw32-gcc: the linker for the Windows target
    wine64                     # runs the Windows test executables
)

missing=()
for p in "${PACKAGES[@]}"; do
    if [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)" != "installed" ]; then
        missing+=("$p")
    fi
done

if [ "${#missing[@]}" -eq 0 ]; then
    echo "install-windows-toolchain: all packages present"
else
    echo "install-windows-toolchain: installing ${missing[*]}"
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Sanity: the tools the build scripts call by full path.
for tool in /usr/bin/rustc /usr/bin/cargo x86_64-w64-mingw32-gcc; do
    command -v "$tool" >/dev/null || { echo "install-windows-toolchain: $tool missing" >&2; exit 1; }
done
if ! command -v wine64 >/dev/null && [ ! -x /usr/lib/wine/wine64 ]; then
    echo "install-windows-toolchain: wine64 missing" >&2
    exit 1
fi
