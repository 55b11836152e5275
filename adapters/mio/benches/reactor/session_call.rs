//! The `concurrent-call` scenario of `reactor.rs`: `concurrent`'s 1,000 concurrent
//! ProcessInfo exchanges per round, each run by the session layer (`Control::call` with
//! `Ask::ProcessInfoBasic`: the same one request and reply on the wire), so that the cost
//! of the layer (its `Call`, deadline and timers, judging the reply) shows beside the raw
//! `Control::connect` of `concurrent`.

use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::session::Ask;
use dsipc::{ClientEvent, Reply};
use dsipc_mio::{Control, Event, Handler, Reactor};

use super::handlers::{drive, ServerThread};
use super::{peak_rss_mib, temp_dir, thread_cpu};

#[derive(Default)]
struct Calls {
    done: u64,
    failed: u64,
    pids: u64,
}

impl Handler for Calls {
    fn on_event(&mut self, _: &mut Control, event: Event<'_>) {
        match event {
            Event::Call {
                event: ClientEvent::Reply(Reply::ProcessInfo(i)),
                ..
            } => self.pids += i.process_id,
            Event::CallDone { result: Ok(()), .. } => self.done += 1,
            Event::CallDone { id, result: Err(e) } => {
                eprintln!("{}: {}", id, e);
                self.failed += 1;
            }
            _ => {}
        }
    }
}

pub(crate) fn concurrent_call() {
    const CONNS: u64 = 1000;
    const ROUNDS: u64 = 10;
    let dir = temp_dir("call");
    let path = dir.join("dotnet-diagnostic-12814-1-socket");
    let server = ServerThread::start(&path, 0, CONNS as usize);
    let mut reactor = Reactor::with_capacity(4096).unwrap();
    let mut h = Calls::default();
    let mut rounds = Vec::new();
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    for r in 0..ROUNDS {
        let tr = Instant::now();
        for _ in 0..CONNS {
            let ask = Ask::ProcessInfoBasic;
            reactor
                .control()
                .call(&path, ask, Duration::from_secs(60))
                .unwrap();
        }
        drive(&mut reactor, &mut h, |h| {
            h.done + h.failed >= (r + 1) * CONNS
        });
        rounds.push(tr.elapsed());
    }
    let total = t0.elapsed();
    let client_cpu = (thread_cpu() - cpu0).as_secs_f64();
    let server_cpu = server.finish();
    assert_eq!(h.failed, 0);
    assert_eq!(h.pids, fixtures::PROCESS_INFO2.process_id * CONNS * ROUNDS);
    rounds.sort();
    let per = |cpu: f64| cpu * 1e6 / (CONNS * ROUNDS) as f64;
    println!(
        "concurrent-call: {} rounds of {} concurrent ProcessInfo calls through the session \
         layer (Control::call, one mio thread; the server thread holds every request of a \
         round until all {} arrived): {:.0} calls/s; round median {:.1} ms, worst {:.1} ms; \
         CPU per call: server thread {:.1} µs, client thread {:.1} µs; peak RSS {:.1} MiB",
        ROUNDS,
        CONNS,
        CONNS,
        (CONNS * ROUNDS) as f64 / total.as_secs_f64(),
        rounds[rounds.len() / 2].as_secs_f64() * 1e3,
        rounds[rounds.len() - 1].as_secs_f64() * 1e3,
        per(server_cpu),
        per(client_cpu),
        peak_rss_mib()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
