#!/usr/bin/env python3
"""Record golden Diagnostic IPC request/reply bytes from real .NET runtimes.

    scripts/setup-runtimes.sh          # once
    python3 tests/runtime/capture.py   # regenerates tests/data/captures/{net8.0.4,netcore3.1.23}/

Stdlib only: a raw AF_UNIX client. For each runtime it starts tests/runtime/host.py (with the
venv interpreter from target/dotnet-venv/dsipc-runtimes.env or $DSIPC_PYTHON) in a minimal,
clean environment, sends one request per connection (header and payload in ONE send), and
writes, per case:
  <case>.request.bin       exact bytes sent
  <case>.reply.bin         every byte received until EOF (EventPipe: only the 28-byte reply)
  <case>.stream-head.bin   EventPipe only: the first 4096 stream bytes
  <case>.stream-tail.bin   EventPipe only: the last 64 stream bytes (after StopTracing)
plus manifest.json. Requests that crash 8.0.4 (see shared/facts/observed-runtime-behavior.md)
are never sent.
"""

import argparse
import glob
import json
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST_PY = os.path.join(REPO, "tests", "runtime", "host.py")
OUT_ROOT = os.path.join(REPO, "tests", "data", "captures")
CAPTURE_HOME = "/tmp/dsipc-capture-home"
DUMP_DIR = "/tmp/dsipc-capture-dumps"  # fixed, so request bytes are the same on every run

MAGIC = b"DOTNET_IPC_V1\x00"
HR = {
    0x80131384: "BAD_ENCODING", 0x80131385: "UNKNOWN_COMMAND", 0x80131386: "UNKNOWN_MAGIC",
    0x80004005: "E_FAIL", 0x80070057: "E_INVALIDARG", 0x8007007E: "module not found",
}
RT_PROVIDER = "Microsoft-Windows-DotNETRuntime"
PROFILER_CLSID = bytes.fromhex("78563412" "3412" "7856" "9abcdef012345678")  # CLSID {12345678-1234-5678-9abc-def012345678}
STREAM_HEAD = 4096
STREAM_TAIL = 64
IO_TIMEOUT = 10.0


def log(msg):
    sys.stderr.write("capture: %s\n" % msg)
    sys.stderr.flush()


# ---------------------------------------------------------------- encoding

def header(cs, cid, payload_len, magic=MAGIC, size=None):
    if size is None:
        size = 20 + payload_len
    return magic + struct.pack("<HBBH", size, cs, cid, 0)


def msg(cs, cid, payload=b""):
    return header(cs, cid, len(payload)) + payload


def ipc_string(s):
    if s is None:
        return struct.pack("<I", 0)
    units = (s + "\x00").encode("utf-16-le")
    return struct.pack("<I", len(units) // 2) + units


def provider(keywords, level, name, args=None):
    return struct.pack("<QI", keywords, level) + ipc_string(name) + ipc_string(args)


def collect_tracing(buffer_mb, fmt, providers, rundown=None):
    p = struct.pack("<II", buffer_mb, fmt)
    if rundown is not None:
        p += struct.pack("<B", 1 if rundown else 0)
    p += struct.pack("<I", len(providers)) + b"".join(providers)
    return msg(0x02, 0x02 if rundown is None else 0x03, p)


def parse_reply_header(b):
    if len(b) < 20:
        return None
    size, cs, cid, _ = struct.unpack("<HBBH", b[14:20])
    return {"magic_ok": b[:14] == MAGIC, "size": size, "cs": cs, "id": cid}


def describe_reply(b):
    h = parse_reply_header(b)
    if not h:
        return "%d bytes, no header" % len(b)
    if h["cs"] == 0xFF and h["id"] == 0xFF and len(b) >= 24:
        code = struct.unpack("<I", b[20:24])[0]
        return "ERROR 0x%08X (%s), size %d" % (code, HR.get(code, "?"), h["size"])
    if h["cs"] == 0xFF and h["id"] == 0x00:
        return "OK, size %d" % h["size"]
    return "header %02x%02x size %d" % (h["cs"], h["id"], h["size"])


# ---------------------------------------------------------------- transport

def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(IO_TIMEOUT)
    s.connect(path)
    return s


def send_once(s, data):
    n = s.send(data)  # one write: .NET Core 3.1 reads each part with a single read
    if n != len(data):
        raise RuntimeError("short send: %d of %d bytes" % (n, len(data)))


def recv_until_eof(s, timeout):
    deadline = time.monotonic() + timeout
    out = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("no EOF within %gs (%d bytes so far)" % (timeout, len(out)))
        s.settimeout(min(left, IO_TIMEOUT))
        chunk = s.recv(65536)
        if not chunk:
            return bytes(out)
        out += chunk


def request(sock_path, data, timeout=IO_TIMEOUT):
    s = connect(sock_path)
    try:
        send_once(s, data)
        return recv_until_eof(s, timeout)
    finally:
        s.close()


class StreamReader(threading.Thread):
    """Drains an EventPipe connection: the 28-byte reply, then the stream until EOF."""

    def __init__(self, s):
        super().__init__(daemon=True)
        self.s = s
        self.reply = bytearray()
        self.head = bytearray()
        self.tail = b""
        self.total = 0
        self.eof = threading.Event()
        self.eof_at = None
        self.error = None

    def run(self):
        try:
            self.s.settimeout(1.0)
            give_up = time.monotonic() + 120
            while time.monotonic() < give_up:
                try:
                    chunk = self.s.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    self.eof_at = time.monotonic()
                    self.eof.set()
                    return
                if len(self.reply) < 28:
                    take = 28 - len(self.reply)
                    self.reply += chunk[:take]
                    chunk = chunk[take:]
                    if len(self.reply) == 28:
                        h = parse_reply_header(bytes(self.reply))
                        if not (h["cs"] == 0xFF and h["id"] == 0x00 and h["size"] == 28):
                            # an error reply is 24 bytes: keep what came and stop at EOF
                            self.reply += chunk
                            chunk = b""
                self.total += len(chunk)
                if len(self.head) < STREAM_HEAD:
                    self.head += chunk[:STREAM_HEAD - len(self.head)]
                self.tail = (self.tail + chunk)[-STREAM_TAIL:]
            self.error = "stream did not end within 120 s"
        except Exception as e:  # noqa: BLE001
            self.error = repr(e)
        finally:
            self.eof.set()


# ---------------------------------------------------------------- host process

def venv_python():
    if os.environ.get("DSIPC_PYTHON"):
        return os.environ["DSIPC_PYTHON"]
    venv = os.environ.get("DSIPC_VENV", os.path.join(REPO, "target", "dotnet-venv"))
    env_file = os.path.join(venv, "dsipc-runtimes.env")
    try:
        with open(env_file) as f:
            for line in f:
                k, _, v = line.strip().partition("=")
                if k == "DSIPC_PYTHON":
                    return v
    except OSError:
        pass
    sys.exit("capture: no %s; run scripts/setup-runtimes.sh first" % env_file)


class Host:
    def __init__(self, runtime, python):
        os.makedirs(CAPTURE_HOME, exist_ok=True)
        # Minimal, clean environment: the ProcessEnvironment capture lists exactly this block
        # (plus whatever the runtime itself adds), so nothing private of this machine leaks.
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": CAPTURE_HOME, "LANG": "C",
               "DSIPC_CAPTURE": "1"}
        self.log_path = os.path.join(CAPTURE_HOME, "host-%s.log" % runtime)
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [python, HOST_PY, "--runtime", runtime, "--busy", "--max-seconds", "300"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log_file,
            env=env, cwd="/", close_fds=True)
        line = self._read_line(60)
        if not line.startswith("READY pid="):
            self.stop()
            raise RuntimeError("host did not get ready: %r (log: %s)" % (line, self.log_path))
        fields = dict(kv.split("=", 1) for kv in line.split()[1:])
        self.pid = int(fields["pid"])
        self.version = fields["runtime"]
        assert self.pid == self.proc.pid, (self.pid, self.proc.pid)
        socks = sorted(glob.glob("/tmp/dotnet-diagnostic-%d-*-socket" % self.pid), key=os.path.getmtime)
        if not socks:
            self.stop()
            raise RuntimeError("no diagnostic socket for pid %d" % self.pid)
        self.sock = socks[-1]
        log("host %s ready: pid %d, %s" % (self.version, self.pid, self.sock))

    def _read_line(self, timeout):
        fd = self.proc.stdout.fileno()
        buf = b""
        deadline = time.monotonic() + timeout
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return buf.decode(errors="replace")
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
        return buf.decode(errors="replace").strip()

    def check_alive(self, case):
        if self.proc.poll() is not None:
            raise RuntimeError("host died (rc %s) after case %s; log: %s" % (self.proc.returncode, case, self.log_path))
        if not os.path.exists(self.sock):
            raise RuntimeError("host lost its diagnostic socket after case %s" % case)

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # host exits on stdin EOF
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log_file.close()


# ---------------------------------------------------------------- recording

class Recorder:
    def __init__(self, outdir, host):
        self.outdir = outdir
        self.host = host
        self.manifest = []
        if os.path.isdir(outdir):
            shutil.rmtree(outdir)
        os.makedirs(outdir)

    def _write(self, name, data):
        with open(os.path.join(self.outdir, name), "wb") as f:
            f.write(data)
        return name

    def add(self, case, req, reply, description, notes="", extra=None, expect=None):
        entry = {
            "case": case,
            "command": req[16:18].hex(),
            "description": description,
            "request": self._write(case + ".request.bin", req),
            "reply": self._write(case + ".reply.bin", reply),
            "reply_size": len(reply),
            "notes": notes,
        }
        if extra:
            entry.update(extra)
        self.manifest.append(entry)
        log("%-32s %s -> %d B: %s" % (case, entry["command"], len(reply), describe_reply(reply)))
        if expect is not None and not expect(reply):
            raise RuntimeError("case %s: unexpected reply %s" % (case, reply.hex()))
        self.host.check_alive(case)

    def simple(self, case, req, description, notes="", expect=None, timeout=IO_TIMEOUT):
        reply = request(self.host.sock, req, timeout)
        self.add(case, req, reply, description, notes, expect=expect)
        return reply

    def stream(self, case, req, description, notes=""):
        """Start a session, keep draining it, StopTracing on a second connection, drain to EOF."""
        s = connect(self.host.sock)
        try:
            send_once(s, req)
            rd = StreamReader(s)
            rd.start()
            t0 = time.monotonic()
            while (len(rd.head) < STREAM_HEAD or time.monotonic() - t0 < 1.0) and not rd.eof.is_set():
                if time.monotonic() - t0 > 20:
                    raise RuntimeError("case %s: only %d stream bytes in 20 s" % (case, len(rd.head)))
                time.sleep(0.05)
            if rd.eof.is_set():
                raise RuntimeError("case %s: stream ended early: %s %s" % (case, bytes(rd.reply).hex(), rd.error))
            before_stop = rd.total
            session = bytes(rd.reply[20:28])
            stop_req = msg(0x02, 0x01, session)
            ts = time.monotonic()
            stop_reply = request(self.host.sock, stop_req, 30)  # rd keeps draining meanwhile
            t_stop = time.monotonic() - ts
            if not rd.eof.wait(60):
                raise RuntimeError("case %s: no EOF after StopTracing" % case)
            if rd.error:
                raise RuntimeError("case %s: %s" % (case, rd.error))
            t_eof = rd.eof_at - ts
        finally:
            s.close()
        reply = bytes(rd.reply)
        head, tail = bytes(rd.head), bytes(rd.tail)
        extra = {
            "stream_head": self._write(case + ".stream-head.bin", head),
            "stream_tail": self._write(case + ".stream-tail.bin", tail),
            "stream_size": rd.total,
            "stream_size_before_stop": before_stop,
        }
        self.add(case, req, reply, description,
                 notes + (" Stream: %d bytes in total, %d before StopTracing; StopTracing reply after "
                          "%.3f s, stream EOF %.3f s after StopTracing was sent."
                          % (rd.total, before_stop, t_stop, t_eof)).strip(),
                 extra=extra, expect=lambda r: r[14:18] == b"\x1c\x00\xff\x00")
        if not head.startswith(b"Nettrace\x14\x00\x00\x00!FastSerialization.1"):
            raise RuntimeError("case %s: stream head is not nettrace: %r" % (case, head[:40]))
        if tail[-2:] != b"\x06\x01":
            log("WARNING: case %s: stream tail does not end with 06 01: %s" % (case, tail.hex()))
        self.add(case + "-stop", stop_req, stop_reply,
                 "StopTracing for the %s session, sent on a second connection while the first kept "
                 "draining" % case,
                 "The request carries this run's session id; the reply echoes it.",
                 expect=lambda r: r[14:18] == b"\x1c\x00\xff\x00" and r[20:28] == session)

    def finish(self):
        with open(os.path.join(self.outdir, "manifest.json"), "w") as f:
            json.dump(self.manifest, f, indent=2)
            f.write("\n")


def ok24(r):
    return r == MAGIC + bytes.fromhex("1800ff00000000000000")


def err(code):
    return lambda r: r == MAGIC + bytes.fromhex("1800ffff0000") + struct.pack("<I", code)


def dump_case(rec, case, cs, cid, dump_type, description):
    shutil.rmtree(DUMP_DIR, ignore_errors=True)
    os.makedirs(DUMP_DIR)
    os.chmod(DUMP_DIR, 0o777)
    name = os.path.join(DUMP_DIR, "core.dmp")
    req = msg(cs, cid, ipc_string(name) + struct.pack("<II", dump_type, 0))
    t0 = time.monotonic()
    reply = request(rec.host.sock, req, 60)
    took = time.monotonic() - t0
    size = os.path.getsize(name) if os.path.exists(name) else None
    shutil.rmtree(DUMP_DIR, ignore_errors=True)  # dumps are never kept
    rec.add(case, req, reply, description,
            "Dump written to %s (deleted afterwards): %s bytes, reply after %.2f s."
            % (name, size, took), expect=ok24)
    if size is None:
        raise RuntimeError("case %s: OK but no dump file" % case)


def rt_providers():
    return [provider(0x1, 4, RT_PROVIDER)]


def capture_net8(rec, host):
    pid = host.pid
    rec.simple("process-info", msg(0x04, 0x00), "ProcessInfo",
               "pid u64, cookie, cmdline (the python executable only), OS, arch.",
               expect=lambda r: r[16:18] == b"\xff\x00" and struct.unpack("<Q", r[20:28])[0] == pid)
    rec.simple("process-info2", msg(0x04, 0x04), "ProcessInfo2",
               "ProcessInfo fields + entrypoint assembly (\"\" in a hosted CLR) + CLR version \"8.0.4\".",
               expect=lambda r: r[16:18] == b"\xff\x00")
    rec.simple("process-info3", msg(0x04, 0x08), "ProcessInfo3",
               "Starts with u32 version=1, then the ProcessInfo2 fields, then the RID \"linux-x64\".",
               expect=lambda r: r[16:18] == b"\xff\x00" and r[20:24] == b"\x01\x00\x00\x00")
    env_check = lambda r: r[14:18] == b"\x1a\x00\xff\x00" and len(r) == 26 + struct.unpack("<I", r[20:24])[0]
    rec.simple("process-environment", msg(0x04, 0x02), "ProcessEnvironment: 26-byte reply, then the continuation until EOF",
               "reply.bin holds the 26-byte reply (u32 nIncomingBytes, u16 future) and the continuation "
               "(u32 count, strings). The host ran with a minimal environment (PATH, HOME, LANG, DSIPC_CAPTURE).",
               expect=env_check)
    setenv = msg(0x04, 0x03, ipc_string("DSIPC_CAPTURE_VAR") + ipc_string("hello=world"))
    rec.simple("set-environment-variable", setenv, "SetEnvironmentVariable DSIPC_CAPTURE_VAR=hello=world", expect=ok24)
    r = rec.simple("process-environment-after-set", msg(0x04, 0x02),
                   "ProcessEnvironment after SetEnvironmentVariable",
                   "Lists DSIPC_CAPTURE_VAR=hello=world.", expect=env_check)
    if "DSIPC_CAPTURE_VAR=hello=world\x00".encode("utf-16-le") not in r:
        raise RuntimeError("SetEnvironmentVariable had no visible effect")
    unset = msg(0x04, 0x03, ipc_string("DSIPC_CAPTURE_VAR") + ipc_string(None))
    rec.simple("set-environment-variable-unset", unset,
               "SetEnvironmentVariable DSIPC_CAPTURE_VAR with a null value (count 0): removes the variable",
               expect=ok24)
    r = request(host.sock, msg(0x04, 0x02))
    if "DSIPC_CAPTURE_VAR".encode("utf-16-le") in r:
        raise RuntimeError("SetEnvironmentVariable with a null value did not remove the variable")
    rec.simple("resume-runtime", msg(0x04, 0x01), "ResumeRuntime (not suspended: OK, no effect)", expect=ok24)
    rec.simple("enable-perfmap", msg(0x04, 0x05, struct.pack("<I", 3)), "EnablePerfMap type 3 (PERFMAP)",
               "Writes /tmp/perf-{pid}.map and /tmp/perfinfo-{pid}.map (deleted by capture.py).", expect=ok24)
    rec.simple("disable-perfmap", msg(0x04, 0x06), "DisablePerfMap", expect=ok24)
    time.sleep(0.2)
    for p in ("/tmp/perf-%d.map" % pid, "/tmp/perfinfo-%d.map" % pid):
        if os.path.exists(p):
            os.unlink(p)
    rec.simple("apply-startup-hook", msg(0x04, 0x07, ipc_string("/nonexistent/x.dll")),
               "ApplyStartupHook with a nonexistent path (not suspended)", expect=err(0x80070057))
    rec.simple("generate-core-dump3-bad-dir",
               msg(0x01, 0x03, ipc_string("/nonexistent/dsipc/x.dmp") + struct.pack("<II", 1, 0)),
               "GenerateCoreDump3 into a directory that does not exist",
               "Error reply with a larger size: u32 HRESULT (E_FAIL) then a UTF-16 string with createdump's "
               "messages (which include the time it took).",
               expect=lambda r: r[16:18] == b"\xff\xff" and r[20:24] == struct.pack("<I", 0x80004005)
               and struct.unpack("<H", r[14:16])[0] == len(r) > 28, timeout=30)
    dump_case(rec, "generate-core-dump", 0x01, 0x01, 1, "GenerateCoreDump type 1 (Normal), diagnostics 0")
    rec.simple("attach-profiler",
               msg(0x03, 0x01, struct.pack("<I", 5) + PROFILER_CLSID + ipc_string("/nonexistent/libprofiler.so")
                   + struct.pack("<I", 0)),
               "AttachProfiler with a nonexistent profiler path, timeout 5, no client data",
               expect=err(0x8007007E), timeout=30)
    rec.simple("startup-profiler",
               msg(0x03, 0x02, PROFILER_CLSID + ipc_string("/nonexistent/libprofiler.so")),
               "StartupProfiler (not suspended)", "8.0.4 answers OK even when not suspended.", expect=ok24)
    rec.stream("collect-tracing2", collect_tracing(256, 1, rt_providers(), rundown=True),
               "CollectTracing2: buffer 256 MB, nettrace, rundown on, %s keywords 0x1 level 4" % RT_PROVIDER)
    rec.stream("collect-tracing", collect_tracing(256, 1, rt_providers()),
               "CollectTracing (v1): buffer 256 MB, nettrace, %s keywords 0x1 level 4 (rundown implicit)" % RT_PROVIDER)
    rec.simple("unknown-command", msg(0x01, 0x04), "Unknown command 0x0104", expect=err(0x80131385))
    rec.simple("bad-magic", header(0x04, 0x00, 0, magic=b"DOTNET_IPC_V2\x00"),
               "Bad magic DOTNET_IPC_V2 (ProcessInfo command bytes)", expect=err(0x80131386))
    rec.simple("bad-encoding-size19", header(0x04, 0x00, 0, size=19),
               "Header with size 19 (< 20), 20 bytes sent", expect=err(0x80131384))


def capture_netcore31(rec, host):
    rec.simple("process-info", msg(0x04, 0x00), "ProcessInfo: the Process set arrived in .NET 5",
               expect=err(0x80131385))
    rec.stream("collect-tracing2", collect_tracing(256, 1, rt_providers(), rundown=True),
               "CollectTracing2: buffer 256 MB, nettrace, rundown on, %s keywords 0x1 level 4" % RT_PROVIDER)
    rec.stream("collect-tracing", collect_tracing(256, 1, rt_providers()),
               "CollectTracing (v1): buffer 256 MB, nettrace, %s keywords 0x1 level 4 (rundown implicit)" % RT_PROVIDER)
    rec.simple("attach-profiler",
               msg(0x03, 0x01, struct.pack("<I", 5) + PROFILER_CLSID + ipc_string("/nonexistent/libprofiler.so")
                   + struct.pack("<I", 0)),
               "AttachProfiler with a nonexistent profiler path, timeout 5, no client data",
               expect=err(0x8007007E), timeout=30)
    dump_case(rec, "generate-core-dump", 0x01, 0x01, 1, "GenerateCoreDump type 1 (Normal), diagnostics 0")
    rec.simple("unknown-command", msg(0x01, 0x04), "Unknown command 0x0104", expect=err(0x80131385))
    rec.simple("bad-magic", header(0x04, 0x00, 0, magic=b"DOTNET_IPC_V2\x00"),
               "Bad magic DOTNET_IPC_V2 (ProcessInfo command bytes)", expect=err(0x80131386))
    rec.simple("bad-encoding-size19", header(0x04, 0x00, 0, size=19),
               "Header with size 19 (< 20), 20 bytes sent", expect=err(0x80131384))


TARGETS = [("net8", "8.0.4", capture_net8), ("netcore31", "3.1.23", capture_netcore31)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", choices=[t[0] for t in TARGETS], action="append",
                    help="only this runtime (repeatable; default: all)")
    args = ap.parse_args()
    python = venv_python()
    for runtime, version, fn in TARGETS:
        if args.runtime and runtime not in args.runtime:
            continue
        dirname = ("net" if runtime == "net8" else "netcore") + version
        host = Host(runtime, python)
        try:
            if host.version != version:
                raise RuntimeError("expected runtime %s, host reports %s" % (version, host.version))
            rec = Recorder(os.path.join(OUT_ROOT, dirname), host)
            fn(rec, host)
            rec.finish()
        finally:
            host.stop()
            shutil.rmtree(DUMP_DIR, ignore_errors=True)
        log("%s: %d cases written to %s" % (dirname, len(rec.manifest), rec.outdir))


if __name__ == "__main__":
    main()
