//! A session that runs until stopped from outside, on both drivers, against the fake runtime
//! (an endless stream until StopTracing): the stop from outside reaches the runtime and the
//! stream is read to its end (the session layer's `Outcome`, stop requested); a recipe that
//! abandons the session when its reader goes away still stops it in the runtime. `dsipc
//! trace`'s `ToFile` started, stopped by its watch and read to its end; its start given up
//! on a second stop while the runtime does not answer.
#![cfg(unix)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use dsipc::session::Outcome;
use dsipc::Command;
use dsipc_recipes::{Collect, End, RecipeError, Request, Stop, Tick};
use dsipc_std::Error;
use dsipc_testkit::{Config, FakeRuntime, StreamSpec, TempDir};

const WAIT: Duration = Duration::from_secs(20);

/// Reads until its [`Stop`] is asked (after `stop_after` bytes, from the consumer: no
/// clock), or abandons once `gone` is set (a reader that went away), which also stops.
struct Tail {
    stop: Stop,
    stop_after: u64,
    gone: Option<Arc<AtomicBool>>,
    fed: u64,
    /// Whether the last poll_ready pushed back (the next one lets the reading go on).
    held: bool,
    /// Whether poll_ready let the next chunk in.
    granted: bool,
    /// Chunks fed without poll_ready letting them in.
    unasked: u32,
}

impl Tail {
    fn new(stop_after: u64) -> Tail {
        Tail {
            stop: Stop::new(),
            stop_after,
            gone: None,
            fed: 0,
            held: false,
            granted: false,
            unasked: 0,
        }
    }

    /// One whose reader goes away after 64 KiB.
    fn abandoning() -> Tail {
        let mut tail = Tail::new(64 << 10);
        tail.gone = Some(Arc::new(AtomicBool::new(false)));
        tail
    }

    fn gone(&self) -> bool {
        self.gone
            .as_ref()
            .map_or(false, |g| g.load(Ordering::Relaxed))
    }
}

impl Collect for Tail {
    /// How it ended, whether the driver stopped it, bytes fed, chunks fed that poll_ready
    /// did not let in.
    type Output = (End, bool, u64, u32);

    fn request(&self) -> Request {
        Request {
            providers: vec![dsipc::session::ProviderSpec::new(
                "Microsoft-Windows-DotNETRuntime",
                0,
                4,
            )],
            buffer_mb: 16,
            rundown: false,
        }
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        if !std::mem::replace(&mut self.granted, false) {
            self.unasked += 1;
        }
        self.fed += data.len() as u64;
        if self.fed >= self.stop_after {
            match &self.gone {
                Some(g) => g.store(true, Ordering::Relaxed),
                None => self.stop.request(),
            }
        }
        Ok(())
    }

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Each chunk is let in on the second ask: the first pushes back (waking at once).
        if !self.granted && !self.held {
            self.held = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.held = false;
        self.granted = true;
        Poll::Ready(())
    }

    fn enough(&mut self, _elapsed: Duration) -> bool {
        self.stop.is_requested() || self.gone()
    }

    fn abandon(&self) -> bool {
        self.gone()
    }

    fn max_bytes(&self) -> u64 {
        u64::MAX
    }

    fn finish(self, end: End, stop_asked: bool) -> Result<Self::Output, RecipeError> {
        Ok((end, stop_asked, self.fed, self.unasked))
    }
}

/// Asks for nothing by time (no `quiet_for`): only the stream's bytes and its [`Stop`]'s
/// wake move the async driver. Tells `first` when its first bytes came.
struct Waits {
    stop: Stop,
    first: Option<tokio::sync::oneshot::Sender<()>>,
    fed: u64,
    /// What it had been fed when it saw the stop.
    fed_at_stop: Option<u64>,
}

impl Collect for Waits {
    /// How it ended, whether the driver stopped it, bytes fed, bytes fed at the stop.
    type Output = (End, bool, u64, Option<u64>);

    fn request(&self) -> Request {
        Tail::new(0).request()
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        self.fed += data.len() as u64;
        if let Some(first) = self.first.take() {
            let _ = first.send(());
        }
        Ok(())
    }

    fn enough(&mut self, _elapsed: Duration) -> bool {
        let stop = self.stop.is_requested();
        if stop && self.fed_at_stop.is_none() {
            self.fed_at_stop = Some(self.fed);
        }
        stop
    }

    fn quiet_for(&self, _now: &Tick) -> Option<Duration> {
        None
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.stop.poll_requested(cx)
    }

    fn finish(self, end: End, stop_asked: bool) -> Result<Self::Output, RecipeError> {
        Ok((end, stop_asked, self.fed, self.fed_at_stop))
    }
}

fn endless(dir: &TempDir) -> FakeRuntime {
    streaming(dir, 16 * 1024, Duration::from_millis(1))
}

/// Until StopTracing: `chunk` bytes, then a `pause`.
fn streaming(dir: &TempDir, chunk: usize, pause: Duration) -> FakeRuntime {
    Config::new()
        .pid(u64::from(std::process::id()))
        .listen_in(dir.path())
        .stream(StreamSpec {
            len: None,
            chunk,
            pause,
            end_marker: true,
            content: None,
        })
        .start()
        .expect("fake runtime")
}

fn stops(rt: &FakeRuntime) -> usize {
    rt.received()
        .iter()
        .filter(|r| r.command == Some(Command::StopTracing))
        .count()
}

/// Waits (bounded) until the runtime saw `n` StopTracing.
fn wait_stops(rt: &FakeRuntime, n: usize) {
    let deadline = std::time::Instant::now() + WAIT;
    while stops(rt) < n {
        assert!(std::time::Instant::now() < deadline, "{:?}", rt.received());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn std_client(rt: &FakeRuntime) -> dsipc_std::DiagnosticsClient {
    dsipc_std::DiagnosticsClient::new(dsipc_std::Endpoint::new(rt.socket_path().unwrap()))
        .with_timeout(WAIT)
}

fn tokio_client(rt: &FakeRuntime) -> dsipc_tokio::DiagnosticsClient {
    dsipc_tokio::DiagnosticsClient::new(dsipc_tokio::Endpoint::new(rt.socket_path().unwrap()))
        .with_timeout(WAIT)
}

/// The fake's stream is a byte pattern, not nettrace: its framing breaks at once, so a
/// whole read ends as a cut stream that had its stop requested.
fn read_to_its_end_after_the_stop(end: &End, fed: u64) {
    match end {
        End::Stream(Outcome::Cut {
            stop_requested: true,
            bytes,
            ..
        }) => assert_eq!(*bytes, fed),
        other => panic!("{:?}", other),
    }
}

/// The session was abandoned (the driver stopped reading), its stop asked first.
fn abandoned_after_its_stop(end: &End, stop_asked: bool) {
    assert!(matches!(end, End::Failed(Error::Aborted)), "{:?}", end);
    assert!(stop_asked);
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn blocking_driver_runs_a_long_session_until_stopped_from_outside() {
    let dir = TempDir::new("dsipc-rl").unwrap();
    let rt = endless(&dir);
    let (end, stop_asked, fed, _) =
        dsipc_recipes::run(&std_client(&rt), Tail::new(256 << 10), None).unwrap();
    assert!(stop_asked);
    assert!(fed >= 256 << 10);
    read_to_its_end_after_the_stop(&end, fed);
    assert_eq!(stops(&rt), 1);
}

#[test]
fn blocking_driver_stops_an_abandoned_session_in_the_runtime() {
    let dir = TempDir::new("dsipc-rl").unwrap();
    let rt = endless(&dir);
    let (end, stop_asked, _, _) =
        dsipc_recipes::run(&std_client(&rt), Tail::abandoning(), None).unwrap();
    abandoned_after_its_stop(&end, stop_asked);
    wait_stops(&rt, 1);
}

#[test]
fn async_driver_runs_a_long_session_until_stopped_and_waits_for_its_consumer() {
    let dir = TempDir::new("dsipc-rl").unwrap();
    let rt = endless(&dir);
    let (end, stop_asked, fed, unasked) = tokio_runtime()
        .block_on(dsipc_recipes::run_async(
            &tokio_client(&rt),
            Tail::new(256 << 10),
            None,
        ))
        .unwrap();
    assert!(stop_asked);
    // Every chunk waited for the consumer.
    assert_eq!(unasked, 0);
    read_to_its_end_after_the_stop(&end, fed);
    assert_eq!(stops(&rt), 1);
}

#[test]
fn async_driver_stops_an_abandoned_session_in_the_runtime() {
    let dir = TempDir::new("dsipc-rl").unwrap();
    let rt = endless(&dir);
    let runtime = tokio_runtime();
    let (end, stop_asked, _, _) = runtime
        .block_on(dsipc_recipes::run_async(
            &tokio_client(&rt),
            Tail::abandoning(),
            None,
        ))
        .unwrap();
    abandoned_after_its_stop(&end, stop_asked);
    // The stop goes on in a task of its own once the session is closed: the runtime runs
    // on while this waits.
    let waiting = async move { tokio::task::spawn_blocking(move || wait_stops(&rt, 1)).await };
    runtime.block_on(waiting).unwrap();
}

/// `dsipc trace`'s watch: stops once 64 KiB arrived, quits on the second stop (a second
/// Ctrl-C), counts what it was told.
#[derive(Default)]
struct Watching {
    stop: bool,
    quit: std::cell::Cell<bool>,
    told_before_start: u32,
    stopping: u32,
}

impl dsipc_recipes::trace::Watch for Watching {
    fn stop_requested(&mut self) -> bool {
        self.stop
    }
    fn quit(&self) -> bool {
        self.quit.get()
    }
    fn stop_before_start(&mut self) {
        self.told_before_start += 1;
        // The second Ctrl-C comes after the first was told.
        self.quit.set(true);
    }
    fn stopping(&mut self) {
        self.stopping += 1;
    }
    fn progress(&mut self, tick: dsipc_recipes::Tick, _: &dsipc_recipes::trace::Live) {
        self.stop = tick.bytes >= 64 << 10;
    }
}

fn trace_request() -> Request {
    Tail::new(0).request()
}

#[test]
fn a_trace_into_a_file_is_started_stopped_and_read_to_its_end() {
    use dsipc_recipes::trace::{start, Ending, Live, ToFile};
    let dir = TempDir::new("dsipc-rf").unwrap();
    let rt = endless(&dir);
    let mut watch = Watching::default();
    let session = start(&std_client(&rt), &trace_request(), &mut watch).unwrap();
    let mut file = Vec::new();
    let live = Live::Profile(Box::default());
    let recipe = ToFile::new(trace_request(), &mut file, live, None, watch);
    let t = dsipc_recipes::run_session(session, recipe, None).unwrap();
    assert!(t.stop_asked && t.write_error.is_none());
    assert!(t.received >= 64 << 10);
    assert_eq!(t.received, file.len() as u64);
    read_to_its_end_after_the_stop(&t.end, t.received);
    // A byte pattern, not nettrace.
    assert_eq!(t.ending, Ending::Unparsed);
    assert_eq!(stops(&rt), 1);
}

#[test]
fn a_start_the_runtime_never_answers_is_given_up_on_a_second_stop() {
    let dir = TempDir::new("dsipc-rh").unwrap();
    let rt = Config::new()
        .pid(u64::from(std::process::id()))
        .listen_in(dir.path())
        .answer(Command::CollectTracing2, dsipc_testkit::Answer::Hang)
        .start()
        .expect("fake runtime");
    let mut watch = Watching {
        stop: true,
        ..Watching::default()
    };
    let r = dsipc_recipes::trace::start(&std_client(&rt), &trace_request(), &mut watch);
    assert!(matches!(r, Err(Error::Aborted)), "{:?}", r.err());
    assert_eq!(watch.told_before_start, 1);
    assert_eq!(watch.stopping, 0);
}

#[test]
fn async_driver_wakes_for_a_stop_while_the_stream_is_quiet() {
    let dir = TempDir::new("dsipc-rl").unwrap();
    // 64 bytes, then quiet for 2 s (the fake answers StopTracing after its pause): the stop
    // asked after the first chunk is seen at once only through its wake, before the second.
    let rt = streaming(&dir, 64, Duration::from_secs(2));
    let client = tokio_client(&rt);
    let stop = Stop::new();
    let (first, first_came) = tokio::sync::oneshot::channel();
    let recipe = Waits {
        stop: stop.clone(),
        first: Some(first),
        fed: 0,
        fed_at_stop: None,
    };
    let (end, stop_asked, fed, fed_at_stop) = tokio_runtime().block_on(async {
        let driver = tokio::time::timeout(WAIT, dsipc_recipes::run_async(&client, recipe, None));
        let stopper = async move {
            first_came.await.expect("the first bytes");
            stop.request();
        };
        let (driven, ()) = tokio::join!(driver, stopper);
        driven.expect("the session ended").unwrap()
    });
    assert!(stop_asked);
    assert_eq!(fed_at_stop, Some(64), "the stop waited for the next chunk");
    read_to_its_end_after_the_stop(&end, fed);
    assert_eq!(stops(&rt), 1);
}
