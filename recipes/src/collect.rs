//! What a recipe is: the session it asks for ([`Request`]), how the session ended
//! ([`End`]), the bound on what it may stream ([`Budget`]), a stop from outside ([`Stop`])
//! and the [`Collect`] trait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use dsipc::payload::Provider;
use dsipc::session::providers::ProviderSpec;
use dsipc::session::Outcome;
use dsipc_std::Error;

use crate::RecipeError;

/// How often the drivers look at the clock while the runtime is quiet.
pub const TICK: Duration = Duration::from_millis(100);

/// The session a [`Collect`] asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The providers to enable.
    pub providers: Vec<ProviderSpec>,
    /// The runtime's session buffer, in MB.
    pub buffer_mb: u32,
    /// Whether the runtime writes its rundown (method names) at the stop.
    pub rundown: bool,
}

impl Request {
    /// The core's providers, borrowing from this request.
    pub fn providers(&self) -> Vec<Provider<'_>> {
        self.providers
            .iter()
            .map(ProviderSpec::as_provider)
            .collect()
    }
}

/// How the session ended.
#[derive(Debug)]
pub enum End {
    /// The runtime ended the stream: stopped, ended by the runtime, or cut at an offset
    /// (the session layer's [`Outcome`], from the stream's framing).
    Stream(Outcome),
    /// The deadline came first.
    TimedOut,
    /// The connection or the runtime failed; [`Error::Aborted`] when the recipe abandoned
    /// the session ([`Collect::abandon`]).
    Failed(Error),
}

/// A stop asked from outside a session (an operation's `DELETE ?stop=true`, say): set from
/// anywhere, read by the recipe's [`Collect::enough`]; the async driver waiting on
/// [`poll_requested`](Self::poll_requested) wakes at once. Clones share the one flag.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<StopInner>);

#[derive(Debug, Default)]
struct StopInner {
    asked: AtomicBool,
    /// The tasks waiting for the stop (one per driver polling it, in practice).
    wakers: Mutex<Vec<Waker>>,
}

impl Stop {
    /// Not asked yet.
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Asks the session to stop (the blocking driver sees it within [`TICK`], the async
    /// driver at once).
    pub fn request(&self) {
        self.0.asked.store(true, Ordering::SeqCst);
        let wakers = std::mem::take(&mut *self.wakers());
        for w in wakers {
            w.wake();
        }
    }

    /// Whether a stop was asked.
    pub fn is_requested(&self) -> bool {
        self.0.asked.load(Ordering::SeqCst)
    }

    /// Ready once a stop was asked; until then `cx`'s task is woken by
    /// [`request`](Self::request) (for a [`Collect::poll_wake`]).
    pub fn poll_requested(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.is_requested() {
            return Poll::Ready(());
        }
        {
            let mut wakers = self.wakers();
            if !wakers.iter().any(|w| w.will_wake(cx.waker())) {
                wakers.push(cx.waker().clone());
            }
        }
        // Asked meanwhile: its wake may have missed the waker just added.
        if self.is_requested() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }

    fn wakers(&self) -> std::sync::MutexGuard<'_, Vec<Waker>> {
        self.0.wakers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Where a running session stands, given to [`Collect::tick`].
#[derive(Debug, Clone, Copy)]
pub struct Tick {
    /// Since the session started.
    pub elapsed: Duration,
    /// Stream bytes received.
    pub bytes: u64,
    /// The wall clock now (what counter samples are timed by).
    pub wall: SystemTime,
}

/// The most a short session may stream unless its [`Collect`] says otherwise: 256 MiB.
/// `stack`'s session is a second of samples and the rundown the stop brings, which names
/// every method the runtime compiled: a few hundred bytes each, tens of MB for the largest
/// applications (200,000 methods); 256 MiB is several times that. What the analysis holds
/// grows with what it reads (about twice, for a stream of distinct stacks), so a runtime
/// that streams on (gigabytes within the timeout) is stopped at the bound instead.
pub const MAX_SESSION_BYTES: u64 = 256 << 20;

/// The most `gcdump`'s heap walk may stream: 8 GiB. Its events describe every object (a BulkNode
/// entry of about 40 bytes: address, size, type, edge count) and every reference (a
/// BulkEdge entry of about 12 bytes), so a heap of 50 million objects and 150 million
/// references streams about 4 GiB, and real heaps that large exist; the graph keeps about
/// half of that (a node's fields, an edge's target), less than the stream. Past 8 GiB the
/// graph alone would take several GiB: no runtime's walk, a runtime streaming on.
pub const MAX_WALK_BYTES: u64 = 8 << 30;
/// What a session has read against its [`Collect::max_bytes`]; shared by the drivers.
pub struct Budget {
    max: u64,
    read: u64,
}

impl Budget {
    /// Nothing read yet; at most `max` bytes.
    pub fn new(max: u64) -> Budget {
        Budget { max, read: 0 }
    }

    /// Counts `n` more bytes: an error past the bound (the session is then closed, which
    /// ends it in the runtime).
    pub fn take(&mut self, n: usize) -> Result<(), RecipeError> {
        self.read = self.read.saturating_add(n as u64);
        if self.read > self.max {
            return Err(RecipeError::TooLarge {
                max_bytes: self.max,
            });
        }
        Ok(())
    }
}

/// What a session collects, and when it has enough.
///
/// A short session ([`stack`](crate::stack), [`gcdump`](crate::gcdump)) says when it has
/// enough by itself. A long one (a trace into a file or a response body, counters) is
/// stopped from outside (a duration, Ctrl-C, a [`Stop`], a client gone) through the same
/// [`enough`](Self::enough), hands each chunk to its consumer in [`feed`](Self::feed), and
/// may [`abandon`](Self::abandon) the session (nobody reads on) or push back
/// ([`poll_ready`](Self::poll_ready), on the async driver). Either way the drivers stop the
/// session once, read on to its end within the session layer's bounds, and hand
/// [`finish`](Self::finish) the [`End`].
pub trait Collect {
    /// The result.
    type Output;
    /// The session to start.
    fn request(&self) -> Request;
    /// The stream's next bytes; an error ends the session (the stream does not parse).
    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError>;
    /// Whether to ask the runtime to stop now (`elapsed` since the session started);
    /// asked after every read (and after every quiet wait: [`quiet_for`](Self::quiet_for))
    /// until it says yes.
    fn enough(&mut self, elapsed: Duration) -> bool;
    /// After every read (data or a quiet wait, [`quiet_for`](Self::quiet_for)): progress lines, data
    /// held until due. Nothing by default.
    fn tick(&mut self, tick: Tick) {
        let _ = tick;
    }
    /// How long the session may stay quiet before [`enough`](Self::enough) and
    /// [`tick`](Self::tick) are asked again, `now` being where it stands: [`TICK`] by
    /// default. `None` when only the stream's bytes or [`poll_wake`](Self::poll_wake) can
    /// change their answers (a recipe with a duration says what is left of it; past it,
    /// `None`): the async driver then sleeps until one comes. The blocking driver, which
    /// cannot be woken, waits at most [`TICK`] whatever this says.
    fn quiet_for(&self, now: &Tick) -> Option<Duration> {
        let _ = now;
        Some(TICK)
    }
    /// Ready when something outside the stream made [`enough`](Self::enough) say yes (a
    /// [`Stop`] requested: [`Stop::poll_requested`]; a reader gone), `cx`'s task woken
    /// then: the async driver asks at once, and stops polling this once the stop was sent.
    /// Never by default (then [`quiet_for`](Self::quiet_for) bounds the wait).
    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let _ = cx;
        Poll::Pending
    }
    /// Whether to stop reading at once (the session ends as [`Error::Aborted`], the
    /// connection closed without waiting for the rest): a second Ctrl-C, a reader gone.
    /// Asked after every read; never by default.
    fn abandon(&self) -> bool {
        false
    }
    /// Whether the recipe takes more bytes now (the async driver waits for it before every
    /// read, and before [`finish`](Self::finish)): a consumer that pushes back, such as a
    /// bounded response body, slows the reading down. Always ready by default.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let _ = cx;
        Poll::Ready(())
    }
    /// The most the session may stream; past it the session is closed and fails
    /// ([`Budget`]). [`MAX_SESSION_BYTES`] unless said otherwise.
    fn max_bytes(&self) -> u64 {
        MAX_SESSION_BYTES
    }
    /// The session is over (`end`; `stop_asked`: StopTracing was sent): the result.
    fn finish(self, end: End, stop_asked: bool) -> Result<Self::Output, RecipeError>;
}
