//! The `runtimes20` scenario: twenty real .NET 8 runtimes resumed by one mio thread.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use dsipc::payload::{Reply, ResumeRuntime};
use dsipc::wire::Guid;
use dsipc::ClientEvent;
use dsipc_mio::{ConnId, Control, Event, Reactor};

use super::{temp_dir, thread_cpu};

pub(super) fn runtimes20() {
    use dsipc_testkit::{HostOptions, HostedRuntime};
    const N: usize = 20;
    if let Err(e) = dsipc_testkit::python() {
        println!("runtimes20: skipped ({})", e);
        return;
    }
    let dir = temp_dir("rt");
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let t0 = Instant::now();
    let mut hosts: Vec<HostedRuntime> = (0..N)
        .map(|_| HostedRuntime::spawn(&HostOptions::net8(300).reverse_port(&port, true)).unwrap())
        .collect();
    let spawned = t0.elapsed();
    let mut advertised: HashSet<Guid> = HashSet::new();
    let mut resumed: HashSet<Guid> = HashSet::new();
    let mut asked: std::collections::HashMap<ConnId, Guid> = Default::default();
    let mut first_advertise = None;
    let mut last_advertise = None;
    let cpu0 = thread_cpu();
    let deadline = Instant::now() + Duration::from_secs(300);
    while resumed.len() < N {
        assert!(Instant::now() < deadline, "runtimes20 stalled");
        reactor
            .poll(
                Some(Duration::from_millis(200)),
                &mut |ctl: &mut Control, e: Event<'_>| match e {
                    // A runtime not seen yet: resume it (later Advertises are held).
                    Event::Advertise {
                        conn, advertise, ..
                    } if advertised.insert(advertise.runtime_cookie) => {
                        first_advertise.get_or_insert(t0.elapsed());
                        last_advertise = Some(t0.elapsed());
                        ctl.send_request(conn, &ResumeRuntime).unwrap();
                        asked.insert(conn, advertise.runtime_cookie);
                    }
                    Event::Client {
                        conn,
                        event: ClientEvent::Reply(Reply::Ok(h)),
                    } if h.is_success() => {
                        resumed.insert(asked[&conn]);
                    }
                    _ => {}
                },
            )
            .unwrap();
    }
    let all_resumed = t0.elapsed();
    let busy = thread_cpu() - cpu0;
    let mut ready_at = Duration::ZERO;
    for h in hosts.iter_mut() {
        h.wait_ready(Duration::from_secs(120)).unwrap();
        ready_at = t0.elapsed();
    }
    let first = first_advertise.unwrap();
    let last = last_advertise.unwrap();
    println!(
        "runtimes20: {} real .NET 8 runtimes suspended on one reverse port (spawned in {:.2} s): \
         first Advertise at {:.2} s, last at {:.2} s, all resumed at {:.2} s \
         ({:.1} ms after the last Advertise; the mio thread used {:.1} ms of CPU in all), \
         all hosts past the runtime load at {:.2} s",
        N,
        spawned.as_secs_f64(),
        first.as_secs_f64(),
        last.as_secs_f64(),
        all_resumed.as_secs_f64(),
        (all_resumed - last).as_secs_f64() * 1e3,
        busy.as_secs_f64() * 1e3,
        ready_at.as_secs_f64()
    );
    drop(hosts);
    let _ = std::fs::remove_dir_all(&dir);
}
