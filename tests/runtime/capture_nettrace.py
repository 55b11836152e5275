#!/usr/bin/env python3
"""Record small golden .nettrace files from the real .NET 8.0.4 and Core 3.1.23 hosts.

    cargo build --release -p dsipc-cli
    python3 tests/runtime/capture_nettrace.py   # rewrites tests/data/nettrace/*.nettrace

For each runtime: start tests/runtime/host.py --busy (every ~50 ms it allocates, calls
GC.Collect() and throws/catches a FormatException), wait for its READY line, then run
`dsipc trace PID -o FILE --duration 0.5` with SampleProfiler and the runtime provider at level
5 with the GC, loader, JIT, contention and exception keywords (0xC019). Rundown is off to
keep the files small (the runtime's rundown adds ~2,700 method records, ~1 MB): symbols come
from live Method/LoadVerbose events. The session ends with StopTracing, so the stream ends
with its end-of-stream marker. Stdlib only.

    python3 tests/runtime/capture_nettrace.py --heap   # rewrites tests/data/nettrace/heap-*.nettrace.gz

Heap traces: tests/runtime/host.py --hold 10000 (10,000 System.Version objects kept reachable),
then `dsipc trace PID --providers Microsoft-Windows-DotNETRuntime:0x1980001:5 --no-rundown
--duration 1.5`: dotnet-gcdump's session (GC, GCHeapCollect, GCHeapDump, GCHeapAndTypeNames,
Type keywords at level 5), which makes the runtime run a blocking gen-2 GC and walk the heap
(GCBulkType, GCBulkNode, GCBulkEdge, GCBulkRoot* events). Gzipped: the pythonnet host's heap
and its finalizer events make ~3 MB of trace.
"""

import gzip

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST_PY = os.path.join(REPO, "tests", "runtime", "host.py")
OUT = os.path.join(REPO, "tests", "data", "nettrace")
# $DSIPC_BIN, else the release build where cargo puts it (see main).
DSIPC = os.environ.get("DSIPC_BIN")
PROVIDERS = "Microsoft-DotNETCore-SampleProfiler:0xF00000000000:5,Microsoft-Windows-DotNETRuntime:0xC019:5"
RUNTIMES = [("net8", "net8.0.4"), ("netcore31", "netcore3.1.23")]


def cargo_target_dir():
    """Where cargo puts the build output (CARGO_TARGET_DIR honoured): scripts/target-dir.sh."""
    return subprocess.check_output(
        ["bash", "-c", '. "$0/scripts/target-dir.sh" && cargo_target_dir "$0"', REPO],
        text=True).strip()


def env_python():
    py = os.environ.get("DSIPC_PYTHON")
    if py:
        return py
    env = os.path.join(REPO, "target", "dotnet-venv", "dsipc-runtimes.env")
    with open(env) as f:
        for line in f:
            if line.startswith("DSIPC_PYTHON="):
                return line.split("=", 1)[1].strip()
    sys.exit("capture_nettrace: no DSIPC_PYTHON (run scripts/setup-runtimes.sh)")


HEAP_PROVIDERS = "Microsoft-Windows-DotNETRuntime:0x1980001:5"
HEAP_OBJECTS = 10000


def main():
    global DSIPC
    if not DSIPC:
        DSIPC = os.path.join(cargo_target_dir(), "release", "dsipc")
    os.makedirs(OUT, exist_ok=True)
    py = env_python()
    heap = "--heap" in sys.argv[1:]
    for rt, name in RUNTIMES:
        mode = ["--hold", str(HEAP_OBJECTS)] if heap else ["--busy"]
        host = subprocess.Popen(
            [py, HOST_PY, "--runtime", rt] + mode + ["--max-seconds", "60"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            line = host.stdout.readline()
            if not line.startswith("READY"):
                sys.exit("capture_nettrace: host did not start: %r" % line)
            pid = line.split("pid=")[1].split()[0]
            if heap:
                raw = os.path.join(OUT, "heap-%s.nettrace" % name)
                subprocess.run([DSIPC, "trace", pid, "-o", raw, "--providers", HEAP_PROVIDERS,
                                "--duration", "1.5", "--no-rundown", "--force"], check=True)
                with open(raw, "rb") as f, gzip.open(raw + ".gz", "wb", 9) as g:
                    g.write(f.read())
                os.unlink(raw)
                print("capture_nettrace: %s.gz: %d bytes" % (raw, os.path.getsize(raw + ".gz")))
                continue
            out = os.path.join(OUT, "%s-busy.nettrace" % name)
            subprocess.run([DSIPC, "trace", pid, "-o", out, "--providers", PROVIDERS,
                            "--duration", "0.5", "--no-rundown", "--force"], check=True)
            print("capture_nettrace: %s: %d bytes" % (out, os.path.getsize(out)))
        finally:
            host.stdin.close()
            host.wait(timeout=30)


if __name__ == "__main__":
    main()
