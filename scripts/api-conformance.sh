#!/usr/bin/env bash
# dsipc serve's HTTP API checked by an outside API tester driven by dotnet-monitor's own
# OpenAPI document (tests/data/dotnet-monitor/openapi.json): schemathesis (PyPI,
# pinned below, in a venv at <cargo target dir>/api-conformance/venv) generates requests
# from the document's parameters and checks each answer against the operation's documented
# responses (status codes, content types, response headers, and the JSON schemas of the
# bodies it can read).
#
# What it starts, and kills on exit: `dsipc serve` (the debug build of the cli crate's
# binary) on loopback with a temporary API key and a settings.json with CollectionRules
# and a FileSystem egress provider, over a real .NET 8 runtime (tests/runtime/host.py, in
# a TMPDIR of its own, throwing and catching exceptions so /exceptions has some) so that
# /processes, /collectionrules and /exceptions answer about a live process.
#
#   scripts/api-conformance.sh      (after scripts/setup-runtimes.sh)
#   ST_MAX_EXAMPLES=N ST_MAX_TIME=S ...   more or fewer cases per operation, a longer run
#
# Bounded: ST_MAX_EXAMPLES (default 25) generated cases per operation in each round and
# ST_MAX_TIME (default 150) seconds for the whole schemathesis run (its fuzzing and stateful
# rounds repeat until the time is spent; about 2.5 minutes in all with the build done).
# Prints schemathesis's report and a summary line; exits non-zero when it finds a failure.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# shellcheck disable=SC1091
. "$ROOT/scripts/target-dir.sh"
TARGET_DIR="$(cargo_target_dir "$ROOT")"
DIR="$TARGET_DIR/api-conformance"
VENV="$DIR/venv"
SPEC="$ROOT/tests/data/dotnet-monitor/openapi.json"
ST_PIN="schemathesis==4.32.5"
MAX_EXAMPLES="${ST_MAX_EXAMPLES:-25}"
MAX_TIME="${ST_MAX_TIME:-150}"

# The operations checked (the collections that run for durationSeconds get one second:
# scripts/api-conformance.toml). Left out, with why:
# - GET /dump: a dump of the runtime (hundreds of MB written) on every generated case.
# - POST /parameters: not implemented by serve yet (501, which the document does not give).
# - DELETE /operations/{operationId}: generated ids name no operation (400, which the
#   document does not give CancelOperation, and dotnet-monitor answers too).
OPERATIONS=(
    GetProcesses GetProcessInfo GetProcessEnvironment GetInfo
    GetCollectionRulesDescription GetCollectionRuleDetailedDescription
    GetExceptions CaptureStacks CaptureGcDump
    GetOperations GetOperationStatus GetMetrics
    CaptureTrace CaptureTraceCustom CaptureLogs CaptureLogsCustom
    CaptureMetrics CaptureMetricsCustom CaptureExceptionsCustom
)
# The checks, and the ones left off with why: scripts/api-conformance.toml.

die() { echo "api-conformance: ERROR: $*" >&2; exit 1; }
log() { echo "api-conformance: $*" >&2; }

[[ -f "$SPEC" ]] || die "no $SPEC"
if [[ -z "${DSIPC_PYTHON:-}" && -f target/dotnet-venv/dsipc-runtimes.env ]]; then
    # shellcheck disable=SC1091
    set -a; . target/dotnet-venv/dsipc-runtimes.env; set +a
fi
[[ -x "${DSIPC_PYTHON:-}" ]] || die "no DSIPC_PYTHON (run scripts/setup-runtimes.sh)"

# 1. schemathesis
mkdir -p "$DIR"
if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating venv $VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
fi
if [[ -f "$VENV/.dsipc-pins" && "$(cat "$VENV/.dsipc-pins")" == "$ST_PIN" && -x "$VENV/bin/st" ]]; then
    log "$ST_PIN already installed"
else
    log "installing $ST_PIN"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q "$ST_PIN" \
        || die "pip install $ST_PIN failed"
    printf '%s' "$ST_PIN" > "$VENV/.dsipc-pins"
fi

# 2. dsipc serve's binary
cargo build --quiet -p dsipc-cli --bin dsipc
BIN="$TARGET_DIR/debug/dsipc"

# 3. a .NET 8 runtime, dsipc serve over it
WORK="$(mktemp -d)"
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/tmp" "$WORK/artifacts"

# Waits (at most 90 s) for a line matching $2 in file $1 and prints it.
await_line() {
    local _ line
    for _ in $(seq 900); do
        line="$(grep -m1 -E "$2" "$1" || true)"
        if [[ -n "$line" ]]; then printf '%s\n' "$line"; return 0; fi
        sleep 0.1
    done
    return 1
}

TMPDIR="$WORK/tmp" "$DSIPC_PYTHON" tests/runtime/host.py --runtime net8 --counters --throw \
    --ignore-stdin --max-seconds 900 >"$WORK/host.out" 2>"$WORK/host.err" &
pids+=("$!")
ready="$(await_line "$WORK/host.out" '^READY')" \
    || { cat "$WORK/host.err" >&2; die ".NET 8 host did not start"; }
pid="$(sed 's/^READY pid=\([0-9]*\).*/\1/' <<<"$ready")"
log "runtime: $ready"

cat >"$WORK/settings.json" <<EOF
{
  "Egress": { "FileSystem": { "artifacts": { "DirectoryPath": "$WORK/artifacts" } } },
  "CollectionRules": {
    "StacksOnStartup": {
      "Trigger": { "Type": "Startup" },
      "Actions": [{ "Type": "CollectStacks", "Settings": { "Egress": "artifacts" } }]
    },
    "LargeGCHeapSize": {
      "Trigger": {
        "Type": "EventCounter",
        "Settings": { "ProviderName": "System.Runtime", "CounterName": "gc-heap-size", "GreaterThan": 100000 }
      },
      "Actions": [{ "Type": "CollectGCDump", "Settings": { "Egress": "artifacts" } }],
      "Limits": { "ActionCount": 1, "ActionCountSlidingWindowDuration": "00:10:00" }
    }
  }
}
EOF
"$BIN" serve --urls http://127.0.0.1:0 --metricUrls http://127.0.0.1:0 --tmpdir "$WORK/tmp" \
    --temp-apikey --configuration-file-path "$WORK/settings.json" \
    >"$WORK/serve.out" 2>"$WORK/serve.err" &
pids+=("$!")
key_line="$(await_line "$WORK/serve.err" 'Authorization: Bearer ')" \
    || { cat "$WORK/serve.err" >&2; die "dsipc serve printed no key"; }
KEY="${key_line##* }"
api_line="$(await_line "$WORK/serve.err" 'dsipc: API on http://')" \
    || { cat "$WORK/serve.err" >&2; die "dsipc serve did not listen"; }
API="http://${api_line##*http://}"
log "dsipc serve: $API (runtime pid $pid)"

# The rules are on the runtime once /collectionrules names them (synchronised, bounded).
for _ in $(seq 900); do
    rules="$(curl -s -H "Authorization: Bearer $KEY" "$API/collectionrules?pid=$pid" || true)"
    [[ "$rules" == *StacksOnStartup*LargeGCHeapSize* || "$rules" == *LargeGCHeapSize*StacksOnStartup* ]] && break
    rules=""
    sleep 0.1
done
[[ -n "$rules" ]] || die "the rules never showed on /collectionrules: $(cat "$WORK/serve.err")"
log "collection rules: $rules"

# 4. schemathesis
include=()
for op in "${OPERATIONS[@]}"; do include+=(--include-operation-id "$op"); done
log "schemathesis ($ST_PIN): ${#OPERATIONS[@]} operations, at most $MAX_EXAMPLES cases each, $MAX_TIME s"
status=0
# From $DIR: schemathesis keeps its replay cache (.schemathesis/) in the current directory.
(cd "$DIR" && "$VENV/bin/st" --no-color --config-file "$ROOT/scripts/api-conformance.toml" \
    run "$SPEC" --url "$API" \
    -H "Authorization: Bearer $KEY" \
    "${include[@]}" \
    --max-examples "$MAX_EXAMPLES" --max-time "$MAX_TIME" --seed 26 \
    --request-timeout 60 --workers 1 \
    --report junit --report-dir "$DIR/report" \
    --output-sanitize true) 2>&1 | tee "$WORK/st.out" || status=$?
if [[ "$status" != 0 ]]; then
    log "schemathesis found failures (exit $status); dsipc serve's log: $WORK/serve.err"
    tail -20 "$WORK/serve.err" >&2
    exit "$status"
fi
cases="$(grep -Eo '[0-9]+ generated, [0-9]+ passed' "$WORK/st.out" | tail -1)"
echo "api-conformance: ${#OPERATIONS[@]} operations answer as dotnet-monitor's openapi.json says ($cases)"
