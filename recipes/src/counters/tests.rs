//! The counters sessions (dsipc_trace::counters decoding) against a real .NET 8 runtime:
//! rates, notices and a clean stop.

use std::time::{Duration, Instant};

use dsipc_testkit::{HostOptions, HostedRuntime};
use dsipc_trace::counters::{
    CounterEvent, CounterKind, CounterSet, CountersConfig, MetricsSession, Notice,
};

use super::{CounterRun, CounterSession};

const LIMIT: Duration = Duration::from_secs(60);
const READY: Duration = Duration::from_secs(90);

fn host(runtime: &str, args: &[&str]) -> HostedRuntime {
    let mut o = HostOptions::net8(300);
    o.runtime = runtime.to_string();
    o.args = args.iter().map(|s| s.to_string()).collect();
    let mut h = HostedRuntime::spawn(&o).expect("spawn host");
    h.wait_ready(READY).expect("host ready");
    h
}

fn lib_session(
    pid: u32,
    list: &str,
    edit: impl FnOnce(&mut CountersConfig),
) -> CounterSession<dsipc_std::Endpoint> {
    let client = dsipc_std::DiagnosticsClient::for_pid(pid)
        .unwrap()
        .with_timeout(Duration::from_secs(10));
    let mut config = CountersConfig::new(CounterSet::parse(list).unwrap(), 1.0, Some(8));
    edit(&mut config);
    CounterSession::start(&client, &config).expect("start the counters session")
}

/// Waits (bounded) for an event `pick` accepts.
fn wait_event<T>(
    s: &CounterSession<dsipc_std::Endpoint>,
    limit: Duration,
    mut pick: impl FnMut(&CounterEvent) -> Option<T>,
) -> T {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match s.recv_timeout(left) {
            Ok(ev) => {
                if let Some(t) = pick(&ev) {
                    return t;
                }
            }
            Err(e) => panic!("no matching event within {:?}: {:?}", limit, e),
        }
    }
}

#[test]
fn library_session_rate_and_clean_stop() {
    let h = host("net8", &["--counters", "--meter-rate", "50"]);
    let s = lib_session(h.pid(), "MyMeter", |_| {});
    let mut rates = Vec::new();
    while rates.len() < 3 {
        let r = wait_event(&s, LIMIT, |ev| match ev {
            CounterEvent::Sample(x) if x.name == "requests" => Some(x.value),
            _ => None,
        });
        rates.push(r);
    }
    assert!(
        rates[1..].iter().all(|r| (40.0..=60.0).contains(r)),
        "{:?}",
        rates
    );
    // The histogram's percentiles (every recorded value is 10) and the up-down counter (it
    // was at 7 before the session; the session sees +1 and -1 per tick: 0).
    let mut quantiles = std::collections::BTreeSet::new();
    let mut queue = None;
    let deadline = Instant::now() + LIMIT;
    while quantiles.len() < 3 || queue.is_none() {
        assert!(Instant::now() < deadline, "{:?} {:?}", quantiles, queue);
        wait_event(&s, LIMIT, |ev| {
            if let CounterEvent::Sample(x) = ev {
                match (x.name.as_str(), x.kind) {
                    ("latency", CounterKind::Percentile(q)) => {
                        assert_eq!(x.value, 10.0, "{:?}", x);
                        quantiles.insert((q * 100.0).round() as u32);
                    }
                    ("queue", kind) => {
                        assert_eq!(kind, CounterKind::UpDown);
                        queue = Some(x.value);
                    }
                    _ => {}
                }
            }
            Some(())
        });
    }
    assert_eq!(quantiles.into_iter().collect::<Vec<_>>(), vec![50, 95, 99]);
    assert_eq!(queue, Some(0.0));
    let end = s.stop();
    assert!(end.stopped, "{:?}", end);
    assert!(end.error.is_none(), "{:?}", end);
    assert!(!end.stats.truncated, "{:?}", end.stats);
    assert_eq!(end.stats.malformed, 0);
    assert_eq!(end.stats.stream_error, None);
}

/// `CounterRun`: the session driven on the caller's thread, events to the caller's sink;
/// stopped from another thread by its StopHandle, it ends cleanly with the rates seen.
#[test]
fn library_run_hands_events_to_a_sink_and_stops_from_another_thread() {
    let h = host("net8", &["--counters", "--meter-rate", "50"]);
    let client = dsipc_std::DiagnosticsClient::for_pid(h.pid())
        .unwrap()
        .with_timeout(Duration::from_secs(10));
    let config = CountersConfig::new(CounterSet::parse("MyMeter").unwrap(), 1.0, Some(8));
    let run = CounterRun::start(&client, &config).expect("start");
    let stop = run.stop_handle();
    let (tx, rx) = std::sync::mpsc::channel();
    let runner = std::thread::spawn(move || {
        let mut rates = Vec::new();
        let end = run.run_observed(
            &mut |ev| {
                if let CounterEvent::Sample(x) = ev {
                    if x.name == "requests" {
                        rates.push(x.value);
                        let _ = tx.send(());
                    }
                }
            },
            &mut |_| {},
        );
        (end, rates)
    });
    // Three rates came through the sink: stop from here.
    for _ in 0..3 {
        rx.recv_timeout(LIMIT).expect("a rate within the limit");
    }
    stop.stop().expect("StopTracing answered");
    let (end, rates) = runner.join().unwrap();
    assert!(end.stopped, "{:?}", end);
    assert!(end.error.is_none(), "{:?}", end);
    assert!(!end.stats.truncated, "{:?}", end.stats);
    assert!(rates.len() >= 3, "{:?}", rates);
    assert!(
        rates[1..3].iter().all(|r| (40.0..=60.0).contains(r)),
        "{:?}",
        rates
    );
}

#[test]
fn library_session_surfaces_limit_and_multiple_session_errors() {
    let h = host("net8", &["--counters", "--meter-rate", "50"]);
    // MaxTimeSeries=0: the runtime reports TimeSeriesLimitReached for our one series.
    let s = lib_session(h.pid(), "MyMeter", |c| c.max_time_series = 0);
    wait_event(&s, LIMIT, |ev| match ev {
        CounterEvent::Notice(Notice::TimeSeriesLimitReached) => Some(()),
        _ => None,
    });
    drop(s); // stops the session
             // A private (pre-.NET 8 style) session while another private one runs: the runtime
             // tells the second one that concurrent sessions are not supported.
    let private = || {
        Some(MetricsSession::Private {
            session_id: dsipc_trace::counters::new_guid(),
        })
    };
    let first = lib_session(h.pid(), "MyMeter", |c| c.metrics = private());
    wait_event(&first, LIMIT, |ev| match ev {
        CounterEvent::Sample(_) => Some(()),
        _ => None,
    });
    let second = lib_session(h.pid(), "MyMeter", |c| c.metrics = private());
    wait_event(&second, LIMIT, |ev| match ev {
        CounterEvent::Notice(Notice::MultipleSessionsNotSupported) => Some(()),
        _ => None,
    });
    drop(second);
    drop(first);
    // Shared sessions (.NET 8): a second client asking for another interval is told.
    let a = lib_session(h.pid(), "MyMeter", |_| {});
    wait_event(&a, LIMIT, |ev| match ev {
        CounterEvent::Sample(_) => Some(()),
        _ => None,
    });
    let b = lib_session(h.pid(), "MyMeter", |c| c.interval_secs = 2.0);
    let msg = wait_event(&b, LIMIT, |ev| match ev {
        CounterEvent::Notice(Notice::MultipleSessionsConfiguredIncorrectly { message }) => {
            Some(message.clone())
        }
        _ => None,
    });
    assert!(msg.contains("RefreshInterval"), "{}", msg);
}
