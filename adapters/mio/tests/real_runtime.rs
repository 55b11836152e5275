//! Real .NET 8.0.4 runtimes (CoreCLR hosted by `tests/runtime/host.py`) against the mio
//! reactor: reverse ports with `DOTNET_DiagnosticPorts=PATH,connect,suspend` (Advertise vs
//! ProcessInfo, suspension until ResumeRuntime, reconnect after every command), twenty
//! suspended runtimes resumed by one thread, and the default listen socket.
//!
//! Needs `DSIPC_PYTHON` (scripts/setup-runtimes.sh, then source
//! target/dotnet-venv/dsipc-runtimes.env; scripts/test.sh does both): without it these
//! tests fail, they do not skip.

mod support;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dsipc::payload::{
    CollectTracing2, CollectTracing3, ProcessEnvironment, ProcessInfo, ProcessInfo2, ProcessInfo3,
    Provider, Reply, ResumeRuntime, StopTracing, TraceFormat,
};
use dsipc::wire::{Advertise, Guid, Hresult, Seq};
use dsipc::ClientEvent;
use dsipc_mio::{ConnId, Control, Event, Handler, Reactor};
use dsipc_testkit::{HostOptions, HostedRuntime, TempDir};

/// One real-runtime test at a time: they are CPU-heavy (each runtime load is ~1 s of CPU).
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn require_python() {
    if let Err(e) = dsipc_testkit::python() {
        panic!("{}", e);
    }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// What happened, owned, in order.
#[derive(Debug, Clone, PartialEq)]
enum Seen {
    Advertise(ConnId, Advertise),
    Info(ConnId, u64, Guid),
    Reply(ConnId, String),
    Error(ConnId, Hresult),
    Env(ConnId, String),
    Stream(ConnId, usize),
    End(ConnId),
    Closed(ConnId, String),
}

#[derive(Default)]
struct Collector {
    seen: VecDeque<Seen>,
    stream_head: HashMap<ConnId, Vec<u8>>,
}

impl Handler for Collector {
    fn on_event(&mut self, _ctl: &mut Control, event: Event<'_>) {
        let s = match event {
            Event::Advertise {
                conn, advertise, ..
            } => Seen::Advertise(conn, advertise),
            Event::Client { conn, event } => match event {
                ClientEvent::Reply(Reply::ProcessInfo(i)) => {
                    Seen::Info(conn, i.process_id, i.runtime_cookie)
                }
                ClientEvent::Reply(Reply::ProcessInfo2(i)) => {
                    Seen::Info(conn, i.process_id, i.runtime_cookie)
                }
                ClientEvent::Reply(Reply::ProcessInfo3(i)) => {
                    Seen::Info(conn, i.process_id, i.runtime_cookie)
                }
                ClientEvent::Reply(r) => Seen::Reply(conn, format!("{:?}", r)),
                ClientEvent::Error(e) => Seen::Error(conn, e.hresult),
                ClientEvent::EnvironmentVariable(t) => Seen::Env(conn, t.chars_lossy().collect()),
                ClientEvent::StreamData(d) => {
                    let head = self.stream_head.entry(conn).or_default();
                    if head.len() < 64 {
                        head.extend_from_slice(&d[..d.len().min(64 - head.len())]);
                    }
                    Seen::Stream(conn, d.len())
                }
                ClientEvent::EndOfStream => Seen::End(conn),
                other => Seen::Reply(conn, format!("{:?}", other)),
            },
            Event::Closed { conn, reason } => Seen::Closed(conn, format!("{:?}", reason)),
            _ => return,
        };
        self.seen.push_back(s);
    }
}

/// Polls until an event matching `pick` arrives (earlier ones are dropped); returns it.
fn wait_for<T>(
    reactor: &mut Reactor,
    c: &mut Collector,
    timeout: Duration,
    what: &str,
    log: Option<&Path>,
    mut pick: impl FnMut(&Seen) -> Option<T>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        while let Some(s) = c.seen.pop_front() {
            if let Some(t) = pick(&s) {
                return t;
            }
        }
        let now = Instant::now();
        if now >= deadline {
            panic!(
                "timed out after {:?} waiting for {}; host log:\n{}",
                timeout,
                what,
                log.map(tail).unwrap_or_default()
            );
        }
        reactor
            .poll(Some((deadline - now).min(Duration::from_millis(100))), c)
            .unwrap();
    }
}

/// Polls for `d`, keeping what arrives.
fn pump(reactor: &mut Reactor, c: &mut Collector, d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        reactor.poll(Some(Duration::from_millis(50)), c).unwrap();
    }
}

#[test]
fn net8_reverse_port_suspended_until_resume() {
    require_python();
    let _g = serial();
    let dir = TempDir::new("dsipc-rt").unwrap();
    let port = dir.join("port.sock");
    let log = dir.join("host.log");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let mut opts = HostOptions::net8(180).reverse_port(&port, true);
    opts.log = Some(log.clone());
    let mut host = HostedRuntime::spawn(&opts).unwrap();
    let pid = u64::from(host.pid());
    let mut c = Collector::default();

    // 1. The first Advertise: the runtime's pid and cookie; ProcessInfo over it agrees.
    let (conn, adv) = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(90),
        "Advertise",
        Some(&log),
        |s| match s {
            Seen::Advertise(c, a) => Some((*c, *a)),
            _ => None,
        },
    );
    let first_advertise = Instant::now();
    assert_eq!(adv.process_id, pid);
    assert_eq!(adv.future, 0);
    reactor.control().send_request(conn, &ProcessInfo).unwrap();
    let (info_pid, info_cookie) = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "ProcessInfo",
        Some(&log),
        |s| match s {
            Seen::Info(c, p, k) if *c == conn => Some((*p, *k)),
            Seen::Error(c, e) if *c == conn => panic!("error reply {:?}", e),
            _ => None,
        },
    );
    assert_eq!(info_pid, adv.process_id);
    assert_eq!(info_cookie, adv.runtime_cookie);

    // 2. It reconnects and advertises again at once, with the same identity. Hold that
    //    connection: the runtime stays suspended (no READY) while nothing resumes it.
    let (held, adv2) = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(10),
        "second Advertise",
        Some(&log),
        |s| match s {
            Seen::Advertise(c, a) => Some((*c, *a)),
            _ => None,
        },
    );
    assert_eq!(adv2, adv);
    let hold_until = first_advertise + Duration::from_secs(3);
    pump(
        &mut reactor,
        &mut c,
        hold_until.saturating_duration_since(Instant::now()),
    );
    assert!(
        !c.seen.iter().any(|s| matches!(s, Seen::Advertise(..))),
        "an idle connection is held: no new Advertise: {:?}",
        c.seen
    );
    assert_eq!(host.try_ready().unwrap(), None, "READY while suspended");
    assert!(host.is_running());

    // 3. ResumeRuntime over the reverse connection: OK, and the host gets past the load.
    reactor
        .control()
        .send_request(held, &ResumeRuntime)
        .unwrap();
    let resumed_at = Instant::now();
    let reply = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "Resume reply",
        Some(&log),
        |s| match s {
            Seen::Reply(c, r) if *c == held => Some(r.clone()),
            Seen::Error(c, e) if *c == held => panic!("error reply {:?}", e),
            _ => None,
        },
    );
    assert_eq!(reply, "Ok(Hresult(S_OK))");
    // 4. Reconnected again after the Resume.
    let (conn3, adv3) = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(10),
        "third Advertise",
        Some(&log),
        |s| match s {
            Seen::Advertise(c, a) => Some((*c, *a)),
            _ => None,
        },
    );
    assert_eq!(adv3, adv);
    let ready = host
        .wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("{}; host log:\n{}", e, tail(&log)));
    eprintln!(
        "READY {:.2} s after ResumeRuntime",
        resumed_at.elapsed().as_secs_f64()
    );
    assert_eq!(u64::from(ready.pid), pid);
    assert_eq!(ready.runtime, "8.0.4");

    // 5. After resume the reverse port still serves one command per connection.
    reactor
        .control()
        .send_request(conn3, &ProcessInfo3)
        .unwrap();
    let (p3, k3) = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "ProcessInfo3",
        Some(&log),
        |s| match s {
            Seen::Info(c, p, k) if *c == conn3 => Some((*p, *k)),
            _ => None,
        },
    );
    assert_eq!((p3, k3), (pid, adv.runtime_cookie));
    let (conn4, adv4) = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(10),
        "fourth Advertise",
        Some(&log),
        |s| match s {
            Seen::Advertise(c, a) => Some((*c, *a)),
            _ => None,
        },
    );
    assert_eq!(adv4, adv);
    reactor
        .control()
        .send_request(conn4, &ProcessEnvironment)
        .unwrap();
    let mut vars = Vec::new();
    let closed4 = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "environment",
        Some(&log),
        |s| match s {
            Seen::Env(c, v) if *c == conn4 => {
                vars.push(v.clone());
                None
            }
            Seen::Closed(c, r) if *c == conn4 => Some(r.clone()),
            _ => None,
        },
    );
    assert_eq!(closed4, "Done");
    assert!(
        vars.iter()
            .any(|v| v.starts_with("DOTNET_DiagnosticPorts=")),
        "{:?}",
        vars
    );
}

/// Twenty .NET 8 runtimes started at once, suspended on one reverse port: one reactor
/// thread resumes all of them over their reverse connections and gets ProcessInfo2 from
/// each. Each runtime's Advertise matches its process and its ProcessInfo, and each stays
/// suspended until its Resume.
#[test]
fn twenty_net8_runtimes_resumed_by_one_thread() {
    require_python();
    let _g = serial();
    support::fdlimit::raise_fd_limit(4096);
    const N: usize = 20;
    let dir = TempDir::new("dsipc-rt").unwrap();
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let started = Instant::now();
    let mut hosts: Vec<HostedRuntime> = (0..N)
        .map(|i| {
            let mut opts = HostOptions::net8(300).reverse_port(&port, true);
            opts.log = Some(dir.join(&format!("host-{}.log", i)));
            HostedRuntime::spawn(&opts).unwrap()
        })
        .collect();
    let by_pid: HashMap<u64, usize> = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| (u64::from(h.pid()), i))
        .collect();

    let mut c = Collector::default();
    let mut cookie_of: HashMap<u64, Guid> = HashMap::new();
    let mut resumed: HashSet<u64> = HashSet::new();
    let mut resume_ok: HashSet<u64> = HashSet::new();
    let mut infos: HashMap<u64, (u64, Guid)> = HashMap::new();
    let mut asked: HashMap<ConnId, (u64, &'static str)> = HashMap::new();
    let mut suspended_checked = 0;
    let mut all_resumed_at = None;
    let deadline = started + Duration::from_secs(300);
    while infos.len() < N {
        if Instant::now() > deadline {
            let logs: Vec<String> = (0..N)
                .filter(|i| !resume_ok.contains(&u64::from(hosts[*i].pid())))
                .map(|i| tail(&dir.join(&format!("host-{}.log", i))))
                .collect();
            panic!(
                "after 300 s: {} advertised, {} resumed, {} ProcessInfo; logs of the others:\n{}",
                cookie_of.len(),
                resume_ok.len(),
                infos.len(),
                logs.join("\n---\n")
            );
        }
        reactor
            .poll(Some(Duration::from_millis(100)), &mut c)
            .unwrap();
        while let Some(s) = c.seen.pop_front() {
            match s {
                Seen::Advertise(conn, adv) => {
                    let pid = adv.process_id;
                    let host = match by_pid.get(&pid) {
                        Some(&i) => i,
                        None => panic!("Advertise from an unknown pid {}", pid),
                    };
                    let cookie = *cookie_of.entry(pid).or_insert(adv.runtime_cookie);
                    assert_eq!(cookie, adv.runtime_cookie, "cookie changed");
                    if resumed.insert(pid) {
                        // Not resumed yet: its host must still be inside the runtime load.
                        assert_eq!(
                            hosts[host].try_ready().unwrap(),
                            None,
                            "pid {} READY before Resume",
                            pid
                        );
                        suspended_checked += 1;
                        reactor
                            .control()
                            .send_request(conn, &ResumeRuntime)
                            .unwrap();
                        asked.insert(conn, (pid, "resume"));
                    } else if resume_ok.contains(&pid)
                        && !infos.contains_key(&pid)
                        && !asked.values().any(|a| *a == (pid, "info"))
                    {
                        reactor.control().send_request(conn, &ProcessInfo2).unwrap();
                        asked.insert(conn, (pid, "info"));
                    }
                    // Otherwise hold the connection: the runtime waits on it quietly.
                }
                Seen::Reply(conn, r) => {
                    let (pid, what) = asked[&conn];
                    assert_eq!((what, r.as_str()), ("resume", "Ok(Hresult(S_OK))"));
                    resume_ok.insert(pid);
                    if resume_ok.len() == N && all_resumed_at.is_none() {
                        all_resumed_at = Some(started.elapsed());
                    }
                }
                Seen::Info(conn, p, k) => {
                    let (pid, _) = asked[&conn];
                    infos.insert(pid, (p, k));
                }
                Seen::Error(conn, e) => panic!("{:?}: error reply {:?}", asked.get(&conn), e),
                Seen::Closed(conn, r) => {
                    if let Some((pid, what)) = asked.remove(&conn) {
                        assert_eq!(r, "Done", "pid {} {}", pid, what);
                    }
                }
                _ => {}
            }
        }
    }
    let all_info_at = started.elapsed();
    assert_eq!(suspended_checked, N);
    for (pid, (p, k)) in &infos {
        assert_eq!(p, pid);
        assert_eq!(k, &cookie_of[pid]);
    }
    let mut ready_pids = HashSet::new();
    for h in hosts.iter_mut() {
        let r = h.wait_ready(Duration::from_secs(120)).unwrap();
        assert_eq!(r.pid, h.pid());
        ready_pids.insert(u64::from(r.pid));
    }
    let expected: HashSet<u64> = by_pid.keys().copied().collect();
    assert_eq!(ready_pids, expected);
    assert_eq!(infos.keys().copied().collect::<HashSet<_>>(), expected);
    eprintln!(
        "{} runtimes: all resumed {:.2} s after spawn, all ProcessInfo2 after {:.2} s, all READY after {:.2} s",
        N,
        all_resumed_at.unwrap().as_secs_f64(),
        all_info_at.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}

fn default_socket(pid: u32) -> PathBuf {
    let tmp = std::env::var_os("TMPDIR")
        .filter(|t| !t.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    let prefix = format!("dotnet-diagnostic-{}-", pid);
    for entry in std::fs::read_dir(&tmp).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with(&prefix) && name.ends_with("-socket") {
            return tmp.join(name);
        }
    }
    panic!("no {}*-socket in {}", prefix, tmp.display());
}

/// The reactor's clients against a real runtime's default listen socket: ProcessInfo 1-3,
/// the environment, CollectTracing3 (unknown to 8.0.4), and a CollectTracing2 stream
/// stopped from a second connection in the same loop.
#[test]
fn net8_default_socket_through_the_reactor() {
    require_python();
    let _g = serial();
    let dir = TempDir::new("dsipc-rt").unwrap();
    let log = dir.join("host.log");
    let mut opts = HostOptions::net8(120);
    opts.log = Some(log.clone());
    let mut host = HostedRuntime::spawn(&opts).unwrap();
    let ready = host
        .wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|e| panic!("{}; host log:\n{}", e, tail(&log)));
    let path = default_socket(ready.pid);
    let mut reactor = Reactor::new().unwrap();
    let mut c = Collector::default();
    let pid = u64::from(ready.pid);

    let a = reactor.control().connect(&path, &ProcessInfo).unwrap();
    let b = reactor.control().connect(&path, &ProcessInfo2).unwrap();
    let d = reactor.control().connect(&path, &ProcessInfo3).unwrap();
    let e = reactor
        .control()
        .connect(&path, &ProcessEnvironment)
        .unwrap();
    let providers = [Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 5)];
    let ct3 = CollectTracing3 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        request_rundown: false,
        request_stackwalk: false,
        providers: Seq::Slice(&providers),
    };
    let f = reactor.control().connect(&path, &ct3).unwrap();
    let mut infos = HashMap::new();
    let mut cookie = None;
    let mut env = 0;
    let mut closed = HashSet::new();
    let mut unknown = false;
    wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "five replies",
        Some(&log),
        |s| {
            match s {
                Seen::Info(conn, p, k) => {
                    assert_eq!(*p, pid);
                    assert!(cookie.is_none_or(|c| c == *k));
                    cookie = Some(*k);
                    infos.insert(*conn, ());
                }
                Seen::Env(conn, _) if *conn == e => env += 1,
                Seen::Error(conn, h) if *conn == f => {
                    assert_eq!(*h, Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND);
                    unknown = true;
                }
                Seen::Closed(conn, r) => {
                    assert_eq!(r, "Done", "{:?}", conn);
                    closed.insert(*conn);
                }
                _ => {}
            }
            if closed.len() == 5 {
                Some(())
            } else {
                None
            }
        },
    );
    assert!(infos.contains_key(&a) && infos.contains_key(&b) && infos.contains_key(&d));
    assert!(env > 5, "{} environment entries", env);
    assert!(unknown);

    // A trace, stopped from a second connection while the first keeps being read.
    let ct2 = CollectTracing2 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        request_rundown: true,
        providers: Seq::Slice(&providers),
    };
    let trace = reactor.control().connect(&path, &ct2).unwrap();
    let session = wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "session id",
        Some(&log),
        |s| match s {
            Seen::Reply(conn, r) if *conn == trace => Some(
                r.trim_start_matches("SessionId(")
                    .trim_end_matches(')')
                    .parse::<u64>()
                    .unwrap(),
            ),
            _ => None,
        },
    );
    let mut bytes = 0usize;
    wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "stream start",
        Some(&log),
        |s| {
            if let Seen::Stream(conn, n) = s {
                if *conn == trace {
                    bytes += n;
                }
            }
            if bytes >= 20 {
                Some(())
            } else {
                None
            }
        },
    );
    assert_eq!(&c.stream_head[&trace][..8], b"Nettrace");
    let stop = reactor
        .control()
        .connect(
            &path,
            &StopTracing {
                session_id: session,
            },
        )
        .unwrap();
    let mut order = Vec::new();
    wait_for(
        &mut reactor,
        &mut c,
        Duration::from_secs(30),
        "stop",
        Some(&log),
        |s| {
            match s {
                Seen::Stream(conn, n) if *conn == trace => bytes += n,
                Seen::End(conn) if *conn == trace => order.push("end of stream"),
                Seen::Reply(conn, r) if *conn == stop => {
                    assert_eq!(r, &format!("SessionId({})", session));
                    order.push("stop reply");
                }
                Seen::Closed(conn, r) if *conn == trace || *conn == stop => {
                    assert_eq!(r, "Done");
                    order.push(if *conn == trace {
                        "trace closed"
                    } else {
                        "stop closed"
                    });
                }
                _ => {}
            }
            if order.len() == 4 {
                Some(())
            } else {
                None
            }
        },
    );
    // (The runtime flushes the session, rundown included, into the trace connection
    // before it answers the stop; both sockets are read by the same loop, so the order in
    // which this thread sees them is not a measure of that.)
    assert!(order.contains(&"end of stream") && order.contains(&"stop reply"));
    assert!(bytes > 1000, "{} bytes", bytes);
    eprintln!("trace: {} bytes, events in order {:?}", bytes, order);
}
