#!/usr/bin/env python3
"""Figures for `dsipc counters export` against real runtimes (prints them; asserts nothing).

    set -a; . target/dotnet-venv/dsipc-runtimes.env; set +a
    cargo build --release -p dsipc-cli
    python3 scripts/bench-counters.py [--runtimes 10] [--seconds 60] [--delay-seconds 20]
                                      [--mode export|monitor]

1. Publish-to-/metrics delay: one .NET 8 host runs `host.py --clock-gauge`, an
   ObservableGauge whose value is the runtime's wall clock (ms) when it is observed, i.e. at
   publication. This script polls /metrics every 2 ms; each new value v seen at local time t
   gives a delay t - v (same machine, same clock). Includes the runtime's own flush delay.
With --mode monitor the exporter is `dsipc monitor --listen PATH --metrics ADDR` and the
runtimes connect to its reverse port (DOTNET_DiagnosticPorts=PATH,connect,nosuspend).

2. Cost: with N runtimes exported (System.Runtime + Meters, 1 s interval), the exporter's CPU
   time (utime+stime from /proc) and peak RSS (VmHWM) over --seconds, scraped once a second as
   Prometheus would.
"""

import argparse
import os
import re
import threading
import socket
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = os.path.join(REPO, "tests", "runtime", "host.py")


def start_host(python, runtime, extra, env=None):
    p = subprocess.Popen([python, HOST, "--runtime", runtime, "--counters", "--max-seconds", "900"] + extra,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         env=env)
    line = p.stdout.readline()
    m = re.match(r"READY pid=(\d+)", line)
    if not m:
        raise SystemExit("host did not start: %r" % line)
    return p, int(m.group(1))


def get(addr, path="/metrics"):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(("GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path).encode())
    chunks = []
    while True:
        b = s.recv(65536)
        if not b:
            break
        chunks.append(b)
    s.close()
    raw = b"".join(chunks).decode()
    return raw.split("\r\n\r\n", 1)[1]


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def proc_hwm_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def cargo_target_dir():
    """Where cargo puts the build output (CARGO_TARGET_DIR honoured): scripts/target-dir.sh."""
    return subprocess.check_output(
        ["bash", "-c", '. "$0/scripts/target-dir.sh" && cargo_target_dir "$0"', REPO],
        text=True).strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsipc", help="the dsipc binary (default: the release build where cargo puts it)")
    ap.add_argument("--runtimes", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--delay-seconds", type=float, default=20)
    ap.add_argument("--mode", choices=["export", "monitor"], default="export")
    args = ap.parse_args()
    if not args.dsipc:
        args.dsipc = os.path.join(cargo_target_dir(), "release", "dsipc")
    python = os.environ.get("DSIPC_PYTHON")
    if not python:
        raise SystemExit("set DSIPC_PYTHON (. target/dotnet-venv/dsipc-runtimes.env)")

    hosts = []
    exp = None
    try:
        t = time.monotonic()
        env = None
        if args.mode == "monitor":
            port_path = "/tmp/dsipc-bench-counters-%d.sock" % os.getpid()
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            addr = "127.0.0.1:%d" % s.getsockname()[1]
            s.close()
            exp = subprocess.Popen([args.dsipc, "monitor", "--listen", port_path, "--metrics", addr,
                                    "--counters", "System.Runtime,MyMeter,Clock", "--refresh-interval", "1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
            while not os.path.exists(port_path):
                time.sleep(0.01)
            env = dict(os.environ, DOTNET_DiagnosticPorts=port_path + ",connect,nosuspend")
        hosts.append(start_host(python, "net8", ["--meter-rate", "50", "--clock-gauge"], env))
        for i in range(1, args.runtimes):
            # 3.1 ignores DOTNET_DiagnosticPorts: monitor mode uses .NET 8 only.
            rt = "net8" if (i % 2 == 0 or args.mode == "monitor") else "netcore31"
            hosts.append(start_host(python, rt, ["--meter-rate", "50"] if rt == "net8" else [], env))
        print("started %d runtimes in %.1f s" % (len(hosts), time.monotonic() - t))
        pids = [str(pid) for _, pid in hosts]
        if args.mode == "export":
            exp = subprocess.Popen([args.dsipc, "counters", "export"] + pids +
                                   ["--listen", "127.0.0.1:0", "--counters", "System.Runtime,MyMeter,Clock",
                                    "--refresh-interval", "1"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            # The address is on stderr ("dsipc: metrics on http://ADDR/metrics"); the rest of
            # stderr is drained so that notices never block the exporter.
            # "counters session started" lines come first, one per runtime.
            seen = []
            m = None
            while m is None and len(seen) <= args.runtimes + 5:
                line = exp.stderr.readline()
                if not line:
                    break
                seen.append(line)
                m = re.search(r"http://([^/]+)/metrics", line)
            threading.Thread(target=exp.stderr.read, daemon=True).start()
            if not m:
                raise SystemExit("export did not start: %r" % "".join(seen))
            addr = m.group(1)
        # Wait (bounded) until every runtime has series.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            body = get(addr)
            if all(('pid="%s"' % p) in body for p in pids):
                break
            time.sleep(0.2)
        else:
            print("warning: not every runtime showed up in /metrics")
        # dotnet-monitor's name: the unit (ms) is added to the counter's own (unix-ms).
        clock_re = re.compile(r'^clock_unix_ms_ms\{pid="%s"\} (\S+)$' % pids[0], re.M)

        # 1. Delay.
        delays = []
        last = None
        end = time.monotonic() + args.delay_seconds
        while time.monotonic() < end:
            body = get(addr)
            now_ms = time.time() * 1000.0
            m = clock_re.search(body)
            if m:
                v = float(m.group(1))
                if last is not None and v != last:
                    delays.append(now_ms - v)
                last = v
            time.sleep(0.002)
        if delays:
            delays.sort()
            print("publish -> /metrics delay over %d publications: median %.1f ms, p90 %.1f ms, max %.1f ms"
                  % (len(delays), statistics.median(delays), delays[int(len(delays) * 0.9) - 1 if len(delays) > 1 else 0],
                     delays[-1]))
        else:
            print("no clock gauge values seen")

        # 2. Cost over --seconds, scraped once a second.
        cpu0 = proc_cpu(exp.pid)
        t0 = time.monotonic()
        series = 0
        while time.monotonic() - t0 < args.seconds:
            body = get(addr)
            series = sum(1 for l in body.splitlines() if l and not l.startswith("#"))
            time.sleep(1.0)
        wall = time.monotonic() - t0
        cpu = proc_cpu(exp.pid) - cpu0
        print("%s of %d runtimes (%d series) for %.0f s: CPU %.2f s (%.2f%% of one core), peak RSS %.1f MiB"
              % (args.mode, len(hosts), series, wall, cpu, 100.0 * cpu / wall, proc_hwm_kib(exp.pid) / 1024.0))
    finally:
        if exp is not None:
            exp.send_signal(2)
            try:
                exp.wait(timeout=60)
            except Exception:
                exp.kill()
        for p, _ in hosts:
            try:
                p.stdin.close()
            except Exception:
                pass
        for p, _ in hosts:
            try:
                p.wait(timeout=10)
            except Exception:
                p.kill()


if __name__ == "__main__":
    main()
