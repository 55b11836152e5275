#!/usr/bin/env python3
"""A target process that hosts a real CoreCLR through pythonnet.

The hosted runtime starts its real, native Diagnostics Server, exactly as `dotnet app.dll`
would, so tests can talk the Diagnostic IPC protocol to it.

    $DSIPC_PYTHON tests/runtime/host.py --runtime net8 [--busy] [--regex] [--counters]
                  [--meter-rate N] [--aspnet-requests RATE [--aspnet-status CODE]
                  [--aspnet-request-ms MS] [--aspnet-path PATH]]
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


def start_meter(rate):
    """Meter 'MyMeter', Counter<long> 'requests' (unit 'requests'), incremented from a thread so
    that after t seconds its total is floor(rate * t): every interval's delta is rate x interval."""
    import clr
    clr.AddReference("System.Diagnostics.DiagnosticSource")
    from System import Int64
    from System.Diagnostics.Metrics import Meter
    meter = Meter("MyMeter", "1.0")
    counter = meter.CreateCounter[Int64]("requests", "requests", "requests handled")
    # Also a Histogram<double> 'latency' (ms) fed 10.0 at every tick (every percentile is 10)
    # and an UpDownCounter<long> 'queue': 7 before any listener, then +1 and -1 at every tick
    # (a session only aggregates what it sees, so it reports 0).
    from System import Double
    latency = meter.CreateHistogram[Double]("latency", "ms", "request latency")
    queue = meter.CreateUpDownCounter[Int64]("queue", "items", "queued items")
    queue.Add(Int64(7))
    start = time.monotonic()

    def tick():
        done = 0
        while True:
            target = int((time.monotonic() - start) * rate)
            if target > done:
                counter.Add(Int64(target - done))
                latency.Record(Double(10.0))
                # Measurements every interval (8.0.4 publishes an UpDownCounter only then).
                queue.Add(Int64(1))
                queue.Add(Int64(-1))
                done = target
            time.sleep(0.01)
    t = threading.Thread(target=tick, daemon=True)
    t.start()
    # Keep the meter alive (a collected Meter stops publishing).
    start_meter.keep = (meter, counter, latency, queue, t)
    log("Meter MyMeter: Counter<long> requests at %g/s, Histogram latency, UpDownCounter queue" % rate)


def start_activities():
    """Nested Start/Stop events on a self-describing EventSource, from a Python thread."""
    from System.Diagnostics.Tracing import EventSource, EventSourceOptions, EventOpcode, EventLevel

    source = EventSource("Dsipc-Activities")
    start_activities.source = source

    def options(opcode):
        o = EventSourceOptions()
        o.Level = EventLevel.Informational
        o.Opcode = opcode
        return o
    start, stop, info = options(EventOpcode.Start), options(EventOpcode.Stop), options(EventOpcode.Info)

    def loop():
        while True:
            source.Write("Request", start)
            source.Write("Step", start)
            source.Write("Work", info)
            source.Write("Step", stop)
            source.Write("Request", stop)
            time.sleep(0.02)
    threading.Thread(target=loop, daemon=True).start()
    log("writing nested activities on EventSource Dsipc-Activities")


def start_clock_gauge():
    import clr
    clr.AddReference("System.Diagnostics.DiagnosticSource")
    from System import Double, Func
    from System.Diagnostics.Metrics import Meter
    meter = Meter("Clock", "1.0")
    gauge = meter.CreateObservableGauge[Double]("unix-ms", Func[Double](lambda: time.time() * 1000.0), "ms")
    start_clock_gauge.keep = (meter, gauge)
    log("Meter Clock: ObservableGauge<double> unix-ms")


def start_aspnet_requests(rate, status, request_ms, path):
    """Play ASP.NET Core's hosting layer (HostingApplicationDiagnostics) on a real runtime:
    a DiagnosticListener named 'Microsoft.AspNetCore' and, at `rate` requests a second from
    a thread, the activity 'Microsoft.AspNetCore.Hosting.HttpRequestIn' started with
    listener.StartActivity(activity, context) and stopped `request_ms` later with
    listener.StopActivity(activity, context) when the listener enables the Start event (as
    the hosting layer does in an app whose logging is on; the bridge enables the event
    names of its filter, not the bare activity name). `context` is a .NET object (a
    pythonnet-defined type, so the runtime's DiagnosticSource bridge reads it by
    reflection as it reads an HttpContext) with Request.Path (`path`) and
    Response.StatusCode (`status`). Requests are paced by elapsed time, so after t seconds
    floor(rate * t) have started (fewer when each runs longer than 1/rate: they run one
    after another). Works on .NET 8 and .NET Core 3.1 (whose bridge forwards the events
    too, but describes no fields of Activity1Start/Stop in its EventPipe metadata)."""
    import clr
    clr.AddReference("System.Diagnostics.DiagnosticSource")
    from System import Object, String, Int32
    from System.Diagnostics import Activity, DiagnosticListener

    class HostRequest(Object):
        __namespace__ = "Dsipc.Host"

        def __init__(self, request_path=None):
            self._path = request_path

        @clr.clrproperty(String)
        def Path(self):
            return self._path

    class HostResponse(Object):
        __namespace__ = "Dsipc.Host"

        def __init__(self, code=0):
            self._code = code

        @clr.clrproperty(Int32)
        def StatusCode(self):
            return self._code

    class HostContext(Object):
        __namespace__ = "Dsipc.Host"

        def __init__(self, request_path=None, code=0):
            self._request = HostRequest(request_path)
            self._response = HostResponse(code)

        @clr.clrproperty(HostRequest)
        def Request(self):
            return self._request

        @clr.clrproperty(HostResponse)
        def Response(self):
            return self._response

    name = "Microsoft.AspNetCore.Hosting.HttpRequestIn"
    listener = DiagnosticListener("Microsoft.AspNetCore")
    start = time.monotonic()

    def loop():
        done = 0
        while True:
            if int((time.monotonic() - start) * rate) <= done:
                time.sleep(0.005)
                continue
            done += 1
            context = HostContext(path, status)
            # As HostingApplicationDiagnostics.BeginRequest / RequestEnd do in an app whose
            # logging is on (so every request gets its activity): the Start event only when
            # the listener enables it, the Stop event only when the Start went through it.
            activity = Activity(name)
            through_listener = listener.IsEnabled(name + ".Start")
            if through_listener:
                listener.StartActivity(activity, context)
            else:
                activity.Start()
            if request_ms > 0:
                time.sleep(request_ms / 1000.0)
            if through_listener:
                listener.StopActivity(activity, context)
            else:
                activity.Stop()
    t = threading.Thread(target=loop, daemon=True)
    t.start()
    # Keep the listener alive (a disposed or collected listener stops publishing).
    start_aspnet_requests.keep = (listener, t)
    log("DiagnosticListener Microsoft.AspNetCore: HttpRequestIn %s at %g/s, %d ms, status %d"
        % (path, rate, request_ms, status))


def main():
    global _tmpdir, _ready_file
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", choices=sorted(RUNTIMES), required=True)
    ap.add_argument("--busy", action="store_true",
                    help="every ~50 ms: allocate, GC.Collect(), throw and catch a .NET exception")
    ap.add_argument("--throw", action="store_true",
                    help="every ~50 ms: throw and catch a .NET FormatException (Int32.Parse)")
    ap.add_argument("--regex", action="store_true",
                    help="spin in Regex backtracking (Regex.IsMatch of 'a'*22+'!' against "
                         "'^(a+)+$', seconds per call in RegexInterpreter) until exit")
    ap.add_argument("--counters", action="store_true",
                    help="initialize RuntimeEventSource (via reflection) so System.Runtime counters flow")
    ap.add_argument("--meter-rate", type=float, default=0.0,
                    help="(.NET 6+) create Meter 'MyMeter' with Counter<long> 'requests' and add to "
                         "it at N per second (by elapsed time, so the rate holds despite sleep jitter), "
                         "Histogram<double> 'latency' recording 10.0 at each addition, and "
                         "UpDownCounter<long> 'queue' (+1, -1 at each addition)")
    ap.add_argument("--clock-gauge", action="store_true",
                    help="(.NET 6+) create Meter 'Clock' with ObservableGauge<double> 'unix-ms' whose "
                         "value is the wall clock (ms since 1970) when the runtime observes it: "
                         "a reader's delay from publication is its own clock minus the value")
    ap.add_argument("--hold", type=int, default=0, metavar="N",
                    help="before READY, allocate N System.Version objects (Version(1, 2, 3, i)) "
                         "and keep them reachable in a List<Version> until exit: a heap with a "
                         "known count of one type (N x 32 bytes on 64-bit)")
    ap.add_argument("--sleeping-thread", action="store_true",
                    help="start a managed thread named 'dsipc-sleeper' that sits in "
                         "Thread.Sleep(Timeout.Infinite) until exit")
    ap.add_argument("--activities", action="store_true",
                    help="after READY, until exit, every ~20 ms: on EventSource 'Dsipc-Activities' "
                         "write 'Request' (opcode Start), 'Step' (Start), 'Work' (Info), "
                         "'Step' (Stop), 'Request' (Stop): nested activities whose ids the "
                         "runtime assigns when a session turns TplEventSource's "
                         "TasksFlowActivityIds (0x80) on")
    ap.add_argument("--aspnet-requests", type=float, default=0.0, metavar="RATE",
                    help="after READY, until exit, play ASP.NET Core's hosting layer: on a "
                         "DiagnosticListener 'Microsoft.AspNetCore', RATE requests a second "
                         "(activity 'Microsoft.AspNetCore.Hosting.HttpRequestIn' started and "
                         "stopped with the listener's StartActivity / StopActivity, whenever a "
                         "subscriber such as the DiagnosticSource bridge enables it) with a "
                         "context whose Request.Path and Response.StatusCode the bridge reads")
    ap.add_argument("--aspnet-status", type=int, default=200, metavar="CODE",
                    help="the requests' Response.StatusCode (default 200)")
    ap.add_argument("--aspnet-request-ms", type=float, default=0.0, metavar="MS",
                    help="how long each request runs between its start and stop (default 0)")
    ap.add_argument("--aspnet-path", default="/api/values", metavar="PATH",
                    help="the requests' Request.Path (default /api/values)")
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

    if args.meter_rate > 0:
        start_meter(args.meter_rate)
    if args.clock_gauge:
        start_clock_gauge()

    if args.hold > 0:
        from System import Version
        from System.Collections.Generic import List
        held = List[Version](args.hold)
        for i in range(args.hold):
            held.Add(Version(1, 2, 3, i))
        main.held = held
        log("holding %d System.Version objects" % args.hold)
    if args.sleeping_thread:
        from System.Threading import Thread, ThreadStart, Timeout

        def sleep_forever():
            Thread.Sleep(Timeout.Infinite)
        sleeper = Thread(ThreadStart(sleep_forever))
        sleeper.IsBackground = True
        sleeper.Name = "dsipc-sleeper"
        sleeper.Start()
        main.sleeper = sleeper
        # READY only once the thread is inside the sleep (its state says WaitSleepJoin): a
        # sampler run right after READY must find Thread.Sleep on its stack, not the thread
        # still on its way in through pythonnet's dispatch (seen on .NET Core 3.1 in CI).
        from System.Threading import ThreadState
        state_deadline = time.monotonic() + 30.0
        while not sleeper.ThreadState.HasFlag(ThreadState.WaitSleepJoin):
            if time.monotonic() > state_deadline:
                log("dsipc-sleeper not in Thread.Sleep after 30 s (state %s)" % sleeper.ThreadState)
                finish(5)
            time.sleep(0.001)
        log("thread dsipc-sleeper in Thread.Sleep(Timeout.Infinite)")

    line = "READY pid=%d runtime=%s\n" % (os.getpid(), Environment.Version)
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(line)
        os.replace(tmp, args.ready_file)
        _ready_file = args.ready_file
    os.write(ready_fd, line.encode())
    os.close(ready_fd)

    if args.activities:
        start_activities()
    if args.aspnet_requests > 0:
        start_aspnet_requests(args.aspnet_requests, args.aspnet_status, args.aspnet_request_ms,
                              args.aspnet_path)

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
        if args.busy or args.throw:
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
