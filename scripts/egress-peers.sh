#!/usr/bin/env bash
# Installs the real egress peers the tests of serve/tests/egress.rs upload to, idempotently:
#
# - Azurite (the Azure Storage emulator, npm registry) with the machine's npm, into
#   <cargo target dir>/egress-peers/node: blob and queue services, which check Shared Key
#   and SAS signatures as Azure does.
# - moto in server mode (PyPI, `moto[server]`) for S3, in a venv at
#   <cargo target dir>/egress-peers/venv, beside the readers: boto3 (S3) and
#   azure-storage-blob / azure-storage-queue (Azure). moto rather than s3rver: it is
#   maintained (s3rver's last release is from 2021), implements the multipart calls
#   (create, upload part, complete, abort, list uploads) as S3 answers them, and shares one
#   venv with boto3, the reader the tests compare with.
#
# Writes <cargo target dir>/egress-peers/egress-peers.env (KEY=VALUE lines, sourceable):
# DSIPC_AZURITE (azurite's binary), DSIPC_MOTO_SERVER (moto_server), DSIPC_EGRESS_PYTHON
# (the venv's python, with boto3 and azure-storage-blob). The tests read the variables, or
# this file when they are unset.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck disable=SC1091
. "$ROOT/scripts/target-dir.sh"
TARGET_DIR="$(cargo_target_dir "$ROOT")"
DIR="$TARGET_DIR/egress-peers"
VENV="$DIR/venv"
NODE_DIR="$DIR/node"
ENV_FILE="$DIR/egress-peers.env"

AZURITE_PIN="azurite@3.37.0"
PY_PINS=(
  "moto[server]==5.2.5"
  "boto3==1.44.5"
  "azure-storage-blob==12.31.1"
  "azure-storage-queue==12.18.1"
)

die() { echo "egress-peers: ERROR: $*" >&2; exit 1; }
log() { echo "egress-peers: $*" >&2; }
mkdir -p "$DIR"

# 1. Azurite
command -v npm >/dev/null || die "no npm on PATH (Debian: apt-get install npm)"
if [[ -f "$NODE_DIR/.dsipc-pin" && "$(cat "$NODE_DIR/.dsipc-pin")" == "$AZURITE_PIN" \
      && -x "$NODE_DIR/node_modules/.bin/azurite" ]]; then
  log "azurite already installed ($AZURITE_PIN)"
else
  log "installing $AZURITE_PIN"
  mkdir -p "$NODE_DIR"
  npm install --prefix "$NODE_DIR" --no-audit --no-fund --loglevel=error "$AZURITE_PIN" \
    || die "npm install $AZURITE_PIN failed"
  printf '%s' "$AZURITE_PIN" > "$NODE_DIR/.dsipc-pin"
fi
AZURITE="$NODE_DIR/node_modules/.bin/azurite"
[[ -x "$AZURITE" ]] || die "no $AZURITE after the install"

# 2. moto server and the readers
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV"
  python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
fi
PY="$VENV/bin/python"
WANT="${PY_PINS[*]}"
if [[ -f "$VENV/.dsipc-pins" && "$(cat "$VENV/.dsipc-pins")" == "$WANT" ]] \
   && "$PY" -c 'import moto, boto3, azure.storage.blob, azure.storage.queue, flask' 2>/dev/null; then
  log "python packages already installed ($WANT)"
else
  log "installing $WANT"
  "$PY" -m pip install --disable-pip-version-check --no-input -q "${PY_PINS[@]}" \
    || die "pip install failed"
  printf '%s' "$WANT" > "$VENV/.dsipc-pins"
fi
[[ -x "$VENV/bin/moto_server" ]] || die "no $VENV/bin/moto_server after the install"

NEW_ENV="DSIPC_AZURITE=$AZURITE
DSIPC_MOTO_SERVER=$VENV/bin/moto_server
DSIPC_EGRESS_PYTHON=$PY"
if [[ ! -f "$ENV_FILE" || "$(cat "$ENV_FILE")" != "$NEW_ENV" ]]; then
  printf '%s\n' "$NEW_ENV" > "$ENV_FILE"
  log "wrote $ENV_FILE"
fi
cat "$ENV_FILE"
