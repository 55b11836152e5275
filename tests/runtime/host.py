#!/usr/bin/env python3
"""A target process that hosts a real CoreCLR through pythonnet.

The hosted runtime starts its real, native Diagnostics Server, exactly as `dotnet app.dll`
would, so tests can talk the Diagnostic IPC protocol to it.

    $DSIPC_PYTHON tests/runtime/host.py --runtime net8 [--busy] [--regex] [--counters]
                  [--max-seconds N] [--ready-file PATH] [--dotnet-root DIR]

Run it with the venv interpreter made by scripts/setup-runtimes.sh.

Protocol with the parent:
- stdout carries exactly one line, `READY pid=<pid> runtime=<Environment.Version>`, once the
  runtime is loaded and its diagnostic socket exists. Everything else goes to stderr; that
  includes native output of the runtime (createdump messages, the "paused during startup"
  notice), because fd 1 is pointed at stderr before the runtime loads.
- the host exits when its stdin reaches EOF (so a parent that dies takes it down), after
  --max-seconds, or on SIGTERM. Give it stdin=PIPE; pass --ignore-stdin to run it
  by hand with stdin from /dev/null.
- If DOTNET_DiagnosticPorts asks for suspend (or DOTNET_DefaultDiagnosticPortSuspend=1),
  loading blocks until a ResumeRuntime arrives over the right port; READY comes after that.
"""

import argparse
import glob
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import threading
import time

RUNTIMES = {
    # name: (tfm, framework version, dotnet root relative to site-packages, env var)
    "net8": ("net8.0", "8.0.4", os.path.join("dnv", "net", "runtime", ".net"), "DSIPC_NET8_ROOT"),
    "netcore31": ("netcoreapp3.1", "3.1.23", os.path.join("dotnetcore2", "bin"), "DSIPC_NETCORE31_ROOT"),
}

_tmpdir = None
_ready_file = None


def log(msg):
    sys.stderr.write("host[%d]: %s\n" % (os.getpid(), msg))
    sys.stderr.flush()


def finish(code):
    """Leave at once, without running the CLR's shutdown (which can hang in a hosted CLR).

    os._exit skips the runtime's own clean-up, so remove our diagnostic socket and debug pipes
    here: stale ones would confuse a client that globs for a (recycled) pid."""
    pid = os.getpid()
    tmp = os.environ.get("TMPDIR") or "/tmp"
    for pat in ("dotnet-diagnostic-%d-*-socket", "clr-debug-pipe-%d-*-in", "clr-debug-pipe-%d-*-out"):
        for path in glob.glob(os.path.join(tmp, pat % pid)):
            try:
                os.unlink(path)
            except OSError:
                pass
    if _tmpdir:
        shutil.rmtree(_tmpdir, ignore_errors=True)
    if _ready_file:
        try:
            os.unlink(_ready_file)
        except OSError:
            pass
    try:
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(code)


def find_root(args, rt):
    _, version, rel, env = RUNTIMES[rt]
    candidates = []
    if args.dotnet_root:
        candidates.append(args.dotnet_root)
    if os.environ.get(env):
        candidates.append(os.environ[env])
    for key in ("purelib", "platlib"):
        candidates.append(os.path.join(sysconfig.get_paths()[key], rel))
    for c in candidates:
        if os.path.isdir(os.path.join(c, "shared", "Microsoft.NETCore.App", version)):
            return c
    log("no .NET %s root found (tried %s); run scripts/setup-runtimes.sh and use its venv python"
        % (version, ", ".join(candidates)))
    finish(2)


def socket_glob(pid):
    tmp = os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(tmp, "dotnet-diagnostic-%d-*-socket" % pid)


def watch_stdin():
    try:
        while True:
            chunk = os.read(0, 4096)
            if not chunk:
                break
    except OSError:
        pass
    log("stdin reached EOF, exiting")
    finish(0)


def main():
    global _tmpdir, _ready_file
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", choices=sorted(RUNTIMES), required=True)
    ap.add_argument("--busy", action="store_true",
                    help="every ~50 ms: allocate, GC.Collect(), throw and catch a .NET exception")
    ap.add_argument("--regex", action="store_true",
                    help="spin in Regex backtracking (Regex.IsMatch of 'a'*22+'!' against "
                         "'^(a+)+$', seconds per call in RegexInterpreter) until exit")
    ap.add_argument("--counters", action="store_true",
                    help="initialize RuntimeEventSource (via reflection) so System.Runtime counters flow")
    ap.add_argument("--max-seconds", type=float, default=600.0)
    ap.add_argument("--ready-file", help="also write the READY line to this file (atomically)")
    ap.add_argument("--dotnet-root", help="override the dotnet root of the chosen runtime")
    ap.add_argument("--ignore-stdin", action="store_true", help="do not exit on stdin EOF")
    ap.add_argument("--socket-timeout", type=float, default=30.0,
                    help="seconds to wait for the diagnostic socket after the runtime loaded")
    args = ap.parse_args()

    deadline = time.monotonic() + args.max_seconds
    # SIGTERM keeps its default action (immediate death): a Python handler would not run while
    # the main thread is blocked inside load() during a suspended startup.
    # A watchdog thread, so even a load() that blocks (suspended startup) ends at max-seconds.
    def watchdog():
        while time.monotonic() < deadline:
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        log("max-seconds (%g) reached, exiting" % args.max_seconds)
        finish(0)
    threading.Thread(target=watchdog, daemon=True).start()
    if not args.ignore_stdin:
        threading.Thread(target=watch_stdin, daemon=True).start()

    # Keep fd 1 for the READY line only; everything else written to fd 1 (by Python or by the
    # runtime and the createdump it spawns) goes to stderr.
    ready_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    tfm, version, _, _ = RUNTIMES[args.runtime]
    root = find_root(args, args.runtime)
    _tmpdir = tempfile.mkdtemp(prefix="dsipc-host-")
    config = os.path.join(_tmpdir, "host.runtimeconfig.json")
    with open(config, "w") as f:
        json.dump({"runtimeOptions": {
            "tfm": tfm,
            "framework": {"name": "Microsoft.NETCore.App", "version": version},
            # No ICU on these machines: without invariant mode the runtime fails fast.
            "configProperties": {"System.Globalization.Invariant": True},
        }}, f)

    log("loading CoreCLR %s from %s" % (version, root))
    from pythonnet import load
    load("coreclr", runtime_config=config, dotnet_root=root)
    import clr  # noqa: F401  (initializes the runtime)
    shutil.rmtree(_tmpdir, ignore_errors=True)  # the runtime no longer needs its config
    _tmpdir = None
    from System import Environment, GC, Int32, Type, Array, Byte
    from System.Reflection import BindingFlags

    pattern = socket_glob(os.getpid())
    sock_deadline = time.monotonic() + args.socket_timeout
    while not glob.glob(pattern):
        if time.monotonic() > sock_deadline:
            log("no diagnostic socket matching %s after %gs" % (pattern, args.socket_timeout))
            finish(3)
        time.sleep(0.01)
    log("diagnostic socket: %s" % ", ".join(glob.glob(pattern)))

    if args.counters:
        t = Type.GetType("System.Diagnostics.Tracing.RuntimeEventSource, System.Private.CoreLib")
        m = t.GetMethod("Initialize", BindingFlags.Static | BindingFlags.NonPublic | BindingFlags.Public) if t else None
        if m is None:
            log("RuntimeEventSource.Initialize not found")
            finish(4)
        m.Invoke(None, None)
        log("RuntimeEventSource initialized")

    line = "READY pid=%d runtime=%s\n" % (os.getpid(), Environment.Version)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(line)
        os.replace(tmp, args.ready_file)
        _ready_file = args.ready_file
    os.write(ready_fd, line.encode())
    os.close(ready_fd)

    if args.regex:
        clr.AddReference("System.Text.RegularExpressions")
        from System.Text.RegularExpressions import Regex
        # Catastrophic backtracking: the CPU stays in RegexInterpreter (a known managed hot
        # method for profiler tests). Each call takes seconds; loop until the host exits.
        while time.monotonic() < deadline:
            Regex.IsMatch("aaaaaaaaaaaaaaaaaaaaaa!", "^(a+)+$")

    keep = []
    while time.monotonic() < deadline:
        if args.busy:
            keep.append(Array.CreateInstance(clr.GetClrType(Byte), 64 * 1024))
            if len(keep) > 16:
                del keep[:8]
            GC.Collect()
            try:
                Int32.Parse("not a number")  # throws System.FormatException inside the CLR
            except Exception:
                pass
        time.sleep(0.05)
    log("max-seconds (%g) reached, exiting" % args.max_seconds)
    finish(0)


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except BaseException:
        import traceback
        traceback.print_exc()
        finish(1)
