//! The reverse-port listener: safe binding, Advertise/command/reconnect cycles with many
//! (fake) runtimes, malformed Advertises, runtimes that go away.

mod support;

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::net::{UnixListener as StdListener, UnixStream as StdStream};
use std::time::{Duration, Instant};

use dsipc::payload::{ProcessInfo, ProcessInfo2, Reply, ResumeRuntime};
use dsipc::wire::{Advertise, Guid};
use dsipc::ClientEvent;
use dsipc_mio::{CloseReason, ConnId, Control, Event, ListenError, Reactor};
use dsipc_testkit::{Config, FakeRuntime, TempDir};

const T: Duration = Duration::from_secs(30);

#[test]
fn binding_is_safe() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let mut reactor = Reactor::new().unwrap();
    let ctl = reactor.control();

    // A fresh socket, owner-only.
    let port = dir.join("port.sock");
    let id = ctl.listen_reverse(&port).unwrap();
    let mode = fs::metadata(&port).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(ctl.listener_path(id), Some(port.as_path()));
    // Taken by a live listener (ours): refused, not removed.
    assert!(matches!(
        ctl.listen_reverse(&port),
        Err(ListenError::InUse { .. })
    ));
    assert!(port.exists());
    // Closing removes the file.
    assert!(ctl.close_listener(id));
    assert!(!port.exists());
    assert!(!ctl.close_listener(id));

    // A stale socket (its process is gone) is replaced.
    let stale = dir.join("stale.sock");
    drop(StdListener::bind(&stale).unwrap());
    assert!(stale.exists());
    ctl.listen_reverse(&stale).unwrap();
    assert!(StdStream::connect(&stale).is_ok());

    // Anything else is refused and left alone.
    let file = dir.join("file");
    fs::write(&file, b"precious").unwrap();
    let sub = dir.join("subdir");
    fs::create_dir(&sub).unwrap();
    let link = dir.join("link");
    symlink(&file, &link).unwrap();
    let dangling = dir.join("dangling");
    symlink(dir.join("nowhere"), &dangling).unwrap();
    for p in [&file, &sub, &link, &dangling] {
        match ctl.listen_reverse(p) {
            Err(ListenError::NotASocket { path }) => assert_eq!(&path, p),
            other => panic!("{}: {:?}", p.display(), other),
        }
    }
    assert_eq!(fs::read(&file).unwrap(), b"precious");
    assert!(sub.is_dir());
    assert!(fs::symlink_metadata(&dangling).is_ok());

    // A path too long for sun_path.
    let long = dir.join(&"x".repeat(120));
    assert!(matches!(
        ctl.listen_reverse(&long),
        Err(ListenError::PathTooLong { .. })
    ));

    // A listener never removes a file that replaced its socket.
    let moved = dir.join("moved.sock");
    let id = ctl.listen(&moved).unwrap();
    fs::remove_file(&moved).unwrap();
    fs::write(&moved, b"not ours").unwrap();
    assert!(ctl.close_listener(id));
    assert_eq!(fs::read(&moved).unwrap(), b"not ours");

    // Dropping the reactor removes the remaining socket files.
    drop(reactor);
    assert!(!stale.exists());
}

/// A monitor that resumes each runtime, then asks every later Advertise for ProcessInfo2
/// until it has `rounds` replies per runtime.
struct Monitor {
    rounds: usize,
    advertised: HashMap<Guid, (u64, usize)>,
    resumed: HashSet<Guid>,
    replies: HashMap<Guid, Vec<u64>>,
    pending: HashMap<ConnId, Guid>,
    failures: Vec<String>,
}

impl Monitor {
    fn new(rounds: usize) -> Self {
        Monitor {
            rounds,
            advertised: HashMap::new(),
            resumed: HashSet::new(),
            replies: HashMap::new(),
            pending: HashMap::new(),
            failures: Vec::new(),
        }
    }

    fn complete(&self, runtimes: usize) -> usize {
        self.replies
            .values()
            .filter(|r| r.len() >= self.rounds)
            .count()
            .min(runtimes)
    }
}

impl dsipc_mio::Handler for Monitor {
    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Advertise {
                conn, advertise, ..
            } => {
                let cookie = advertise.runtime_cookie;
                let e = self
                    .advertised
                    .entry(cookie)
                    .or_insert((advertise.process_id, 0));
                assert_eq!(e.0, advertise.process_id, "pid changed for a cookie");
                e.1 += 1;
                let r = if self.resumed.insert(cookie) {
                    ctl.send_request(conn, &ResumeRuntime)
                } else if self.replies.get(&cookie).map_or(0, |r| r.len()) < self.rounds {
                    ctl.send_request(conn, &ProcessInfo2)
                } else {
                    // Done with this runtime: hold the connection (it would reconnect at
                    // once if closed).
                    return;
                };
                r.unwrap();
                self.pending.insert(conn, cookie);
            }
            Event::Client {
                conn,
                event: ClientEvent::Reply(Reply::ProcessInfo2(info)),
            } => {
                let cookie = self.pending[&conn];
                assert_eq!(info.runtime_cookie, cookie);
                self.replies
                    .entry(cookie)
                    .or_default()
                    .push(info.process_id);
            }
            Event::Client {
                event: ClientEvent::Error(e),
                ..
            } => self.failures.push(format!("{:?}", e)),
            Event::Closed { conn, reason } => {
                self.pending.remove(&conn);
                match reason {
                    CloseReason::Done | CloseReason::Closed => {}
                    other => self.failures.push(format!("{:?}", other)),
                }
            }
            _ => {}
        }
    }
}

/// Twenty fake runtimes, suspended on one reverse port: one thread resumes each over its
/// reverse connection, then gets ProcessInfo2 three times from each; every command is
/// followed by a reconnect and a new Advertise with the same pid and cookie.
#[test]
fn many_runtimes_advertise_command_reconnect() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let runtimes: Vec<FakeRuntime> = (0..20)
        .map(|i| {
            Config::new()
                .pid(10_000 + i)
                .reverse_port(&port, true)
                .start()
                .unwrap()
        })
        .collect();
    assert!(runtimes.iter().all(|r| !r.is_resumed()));
    let mut m = Monitor::new(3);
    support::run_until(&mut reactor, &mut m, T, "20 runtimes x 3", |m| {
        m.complete(20) == 20
    });
    assert!(m.failures.is_empty(), "{:?}", m.failures);
    for rt in &runtimes {
        assert!(rt.wait_resumed(T), "not resumed");
        let cookie = rt.identity().cookie;
        assert_eq!(m.replies[&cookie], vec![rt.identity().pid; 3]);
        // Resume + 3 commands: 4 reconnects after the first Advertise.
        assert!(m.advertised[&cookie].1 >= 4, "{:?}", m.advertised[&cookie]);
        assert_eq!(m.advertised[&cookie].0, rt.identity().pid);
        assert!(rt.received().iter().all(|r| r.reverse));
    }
    // The held connections: one per runtime, idle.
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(300) {
        reactor
            .poll(Some(Duration::from_millis(50)), &mut m)
            .unwrap();
    }
    assert_eq!(reactor.control().connection_count(), 20);
    let before: usize = m.advertised.values().map(|a| a.1).sum();
    // Runtimes that exit: their idle connections close as PeerClosed.
    drop(runtimes);
    let mut closed = 0;
    let deadline = Instant::now() + T;
    while closed < 20 {
        assert!(Instant::now() < deadline);
        reactor
            .poll(
                Some(Duration::from_millis(100)),
                &mut |_: &mut Control, e: Event<'_>| {
                    if let Event::Closed { reason, .. } = e {
                        assert!(matches!(reason, CloseReason::PeerClosed), "{:?}", reason);
                        closed += 1;
                    }
                },
            )
            .unwrap();
    }
    let after: usize = m.advertised.values().map(|a| a.1).sum();
    assert_eq!(before, after);
}

/// ResumeRuntime over the fake runtime's listen socket does not resume it when it is
/// suspended on a reverse port (as .NET 8 behaves); over the reverse port it does, once a
/// monitor listens there (the runtime retries until then).
#[test]
fn resume_only_over_the_reverse_port() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    // Nobody listens on the reverse port yet: the runtime keeps retrying, suspended.
    let rt = Config::new()
        .listen_in(dir.path())
        .reverse_port(&port, true)
        .start()
        .unwrap();
    let mut peer = support::Peer::default();
    let c = reactor
        .control()
        .connect(rt.socket_path().unwrap(), &ResumeRuntime)
        .unwrap();
    peer.track(c);
    support::run_until(&mut reactor, &mut peer, T, "resume (listen)", |p| {
        p.all_closed()
    });
    assert!(peer.logs[&c].done);
    assert!(!rt.is_resumed());
    assert_eq!(rt.advertised(), 0);
    reactor.control().listen_reverse(&port).unwrap();
    let mut m = Monitor::new(1);
    support::run_until(&mut reactor, &mut m, T, "resume (reverse)", |m| {
        m.complete(1) == 1
    });
    assert!(rt.is_resumed());
}

/// Runtimes that do not speak the protocol: a bad magic, a short Advertise, data before a
/// command is sent. Each ends its connection with a typed reason; the listener goes on.
#[test]
fn malformed_advertise() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let adv = Advertise {
        runtime_cookie: Guid::from_fields(9, 8, 7, [6; 8]),
        process_id: 55,
        future: 0,
    };
    let mut good = [0u8; 34];
    adv.emit(&mut good).unwrap();
    let mut bad_magic = good;
    bad_magic[..8].copy_from_slice(b"ADVR_V2\0");
    let mut extra = good.to_vec();
    extra.extend_from_slice(b"unasked");
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (bad_magic.to_vec(), "BadAdvertise(BadMagic"),
        (
            good[..20].to_vec(),
            "BadAdvertise(Truncated { available: 20 })",
        ),
        (extra, "UnexpectedData { len: 7 }"),
        (Vec::new(), "BadAdvertise(Truncated { available: 0 })"),
    ];
    for (bytes, expect) in cases {
        let mut s = StdStream::connect(&port).unwrap();
        s.write_all(&bytes).unwrap();
        drop(s);
        let mut reason = None;
        let mut advertised = None;
        let deadline = Instant::now() + T;
        while reason.is_none() {
            assert!(Instant::now() < deadline, "{}", expect);
            reactor
                .poll(
                    Some(Duration::from_millis(100)),
                    &mut |_: &mut Control, e: Event<'_>| match e {
                        Event::Closed { reason: r, .. } => reason = Some(format!("{:?}", r)),
                        Event::Advertise { advertise, .. } => advertised = Some(advertise),
                        _ => {}
                    },
                )
                .unwrap();
        }
        let reason = reason.unwrap();
        assert!(
            reason.starts_with("Failed(Client(") && reason.contains(expect),
            "{}: {}",
            expect,
            reason
        );
        if expect.starts_with("UnexpectedData") {
            assert_eq!(advertised, Some(adv));
        }
    }
    assert_eq!(reactor.control().connection_count(), 0);
    assert_eq!(reactor.control().listener_count(), 1);
}

/// The runtime side in the reactor ([`Control::connect_advertising`]) against the monitor
/// side, both in one thread: 50 runtimes, 4 commands each, reconnecting after each.
#[test]
fn runtime_side_in_the_reactor() {
    let dir = TempDir::new("dsipc-mio").unwrap();
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let mut runtimes: HashMap<ConnId, Advertise> = HashMap::new();
    for i in 0..50u64 {
        let adv = Advertise {
            runtime_cookie: Guid::from_fields(i as u32, 1, 2, [3; 8]),
            process_id: 20_000 + i,
            future: 0,
        };
        let c = reactor.control().connect_advertising(&port, adv).unwrap();
        runtimes.insert(c, adv);
    }
    let mut counts: HashMap<u64, usize> = HashMap::new();
    let mut served = 0;
    let deadline = Instant::now() + T;
    while counts.len() < 50 || counts.values().any(|&n| n < 4) {
        assert!(Instant::now() < deadline, "{:?}", counts);
        reactor
            .poll(
                Some(Duration::from_millis(100)),
                &mut |ctl: &mut Control, e: Event<'_>| match e {
                    Event::Advertise { conn, .. } => ctl.send_request(conn, &ProcessInfo).unwrap(),
                    Event::Request { conn, .. } => {
                        let adv = runtimes[&conn];
                        let reply = dsipc::payload::ProcessInfoReply {
                            process_id: adv.process_id,
                            runtime_cookie: adv.runtime_cookie,
                            ..dsipc::fixtures::PROCESS_INFO2.as_process_info()
                        };
                        ctl.respond(conn, &dsipc::Response::Ok(Reply::ProcessInfo(reply)))
                            .unwrap();
                        served += 1;
                    }
                    Event::Client {
                        event: ClientEvent::Reply(Reply::ProcessInfo(info)),
                        ..
                    } => *counts.entry(info.process_id).or_insert(0) += 1,
                    Event::Closed { conn, reason } => {
                        assert!(reason.is_done(), "{:?}", reason);
                        if let Some(adv) = runtimes.remove(&conn) {
                            if counts.get(&adv.process_id).copied().unwrap_or(0) < 4 {
                                let c = ctl.connect_advertising(&port, adv).unwrap();
                                runtimes.insert(c, adv);
                            }
                        }
                    }
                    _ => {}
                },
            )
            .unwrap();
    }
    assert_eq!(served, 200);
}
