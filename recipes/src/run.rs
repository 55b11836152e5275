//! What the drivers decide, written once and without I/O or clocks: how long to wait for
//! the next bytes (what the recipe's [`Collect::quiet_for`] says, never past the deadline), what a session may stream
//! ([`Budget`]), when to send the stop (once, the first time [`Collect::enough`] says so)
//! and when to stop reading ([`Collect::abandon`]). A driver moves bytes and sleeps as
//! [`Run`] says; a caller's own event loop can drive a recipe the same way:
//!
//! ```text
//! let mut run = Run::new(recipe, deadline);
//! let end = loop {
//!     let wait = match run.wait(&tick) { Ok(w) => w, Err(end) => break end };
//!     read, at most `wait` (None: until bytes or the recipe's poll_wake):
//!         bytes ──► run.feed(bytes)?;  the stream's end ──► break End::Stream
//!     if run.after_read(tick) { send StopTracing (this once) }
//!     if run.abandoned() { break End::Failed(Error::Aborted) }
//! };
//! close the connection; run.finish(end)
//! ```

use std::time::Duration;

use crate::collect::{Budget, Collect, End, Tick};
use crate::RecipeError;

/// The shortest wait [`Run::wait`] gives for a recipe's quiet time.
pub const MIN_WAIT: Duration = Duration::from_millis(1);

/// A recipe's session as the drivers run it: the recipe, what it has read against its
/// [`Budget`], its deadline and whether the stop was sent.
pub struct Run<C: Collect> {
    c: C,
    budget: Budget,
    deadline: Option<Duration>,
    stop_asked: bool,
}

impl<C: Collect> Run<C> {
    /// A session of `c` just started; `deadline` (since the start) ends it as
    /// [`End::TimedOut`] (`None`: only the recipe or the runtime ends it).
    pub fn new(c: C, deadline: Option<Duration>) -> Run<C> {
        let budget = Budget::new(c.max_bytes());
        Run {
            c,
            budget,
            deadline,
            stop_asked: false,
        }
    }

    /// How long the next read may wait, `now` being where the session stands: what the
    /// recipe's [`Collect::quiet_for`] says (at least [`MIN_WAIT`], so that a recipe
    /// answering zero cannot spin the driver), never past the deadline; `None`: until
    /// the stream's bytes or the recipe's [`Collect::poll_wake`]. The end
    /// ([`End::TimedOut`]) once the deadline has passed.
    pub fn wait(&self, now: &Tick) -> Result<Option<Duration>, End> {
        let left = match self.deadline {
            Some(d) if now.elapsed >= d => return Err(End::TimedOut),
            Some(d) => Some(d - now.elapsed),
            None => None,
        };
        let quiet = self.c.quiet_for(now).map(|q| q.max(MIN_WAIT));
        Ok(match (quiet, left) {
            (Some(q), Some(l)) => Some(q.min(l)),
            (q, l) => q.or(l),
        })
    }

    /// The stream's next bytes, counted against the [`Budget`] and handed to the recipe;
    /// an error ends the session (past the bound, or a stream that does not parse).
    pub fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        self.budget.take(data.len())?;
        self.c.feed(data)
    }

    /// After every read (bytes, or a quiet wait): the recipe's [`Collect::tick`], then
    /// whether to send StopTracing now: the first time [`Collect::enough`] says so, and
    /// never again. Read on after it: the rundown comes after the stop, and the session
    /// layer bounds the drain that follows.
    pub fn after_read(&mut self, tick: Tick) -> bool {
        self.c.tick(tick);
        let stop = !self.stop_asked && self.c.enough(tick.elapsed);
        self.stop_asked |= stop;
        stop
    }

    /// Whether to stop reading now ([`Collect::abandon`], asked after
    /// [`after_read`](Self::after_read)'s stop was sent): close the connection, the session
    /// ends as [`Error::Aborted`](dsipc_std::Error::Aborted).
    pub fn abandoned(&self) -> bool {
        self.c.abandon()
    }

    /// Whether StopTracing was asked for.
    pub fn stop_asked(&self) -> bool {
        self.stop_asked
    }

    /// The recipe (the async driver waits on its [`Collect::poll_ready`]).
    pub fn recipe(&mut self) -> &mut C {
        &mut self.c
    }

    /// The session is over (`end`), its connection closed: the recipe's result.
    pub fn finish(self, end: End) -> Result<C::Output, RecipeError> {
        self.c.finish(end, self.stop_asked)
    }
}

#[cfg(test)]
mod tests {
    use std::time::SystemTime;

    use dsipc::session::Outcome;
    use dsipc_std::Error;

    use super::*;
    use crate::{Request, TICK};

    /// Enough after `enough_at`; abandons once `abandon` is set; keeps what it was fed.
    #[derive(Default)]
    struct Probe {
        enough_at: Option<Duration>,
        abandon: bool,
        fed: usize,
        enough_calls: usize,
        max: Option<u64>,
        /// What quiet_for says (`None`: the default).
        quiet: Option<Option<Duration>>,
    }

    impl Collect for Probe {
        type Output = (usize, bool, String);
        fn request(&self) -> Request {
            Request {
                providers: Vec::new(),
                buffer_mb: 1,
                rundown: false,
            }
        }
        fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
            self.fed += data.len();
            Ok(())
        }
        fn enough(&mut self, elapsed: Duration) -> bool {
            self.enough_calls += 1;
            self.enough_at.map_or(false, |at| elapsed >= at)
        }
        fn abandon(&self) -> bool {
            self.abandon
        }
        fn quiet_for(&self, _now: &Tick) -> Option<Duration> {
            self.quiet.unwrap_or(Some(TICK))
        }
        fn max_bytes(&self) -> u64 {
            self.max.unwrap_or(crate::MAX_SESSION_BYTES)
        }
        fn finish(self, end: End, stop_asked: bool) -> Result<Self::Output, RecipeError> {
            Ok((self.fed, stop_asked, format!("{:?}", end)))
        }
    }

    fn at(ms: u64) -> Tick {
        Tick {
            elapsed: Duration::from_millis(ms),
            bytes: 0,
            wall: SystemTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn run_waits_as_the_recipe_says_and_never_past_the_deadline() {
        let run = Run::new(Probe::default(), Some(Duration::from_millis(250)));
        // The default: a TICK.
        assert_eq!(run.wait(&at(0)).ok(), Some(Some(TICK)));
        assert_eq!(
            run.wait(&at(200)).ok(),
            Some(Some(Duration::from_millis(50)))
        );
        assert!(matches!(run.wait(&at(250)), Err(End::TimedOut)));
        let endless = Run::new(Probe::default(), None);
        assert_eq!(endless.wait(&at(1 << 40)).ok(), Some(Some(TICK)));
        // A recipe quiet until woken: the deadline alone, or no bound at all.
        let woken = |quiet| Probe {
            quiet: Some(quiet),
            ..Probe::default()
        };
        let run = Run::new(woken(None), Some(Duration::from_secs(2)));
        assert_eq!(
            run.wait(&at(500)).ok(),
            Some(Some(Duration::from_millis(1500)))
        );
        assert_eq!(Run::new(woken(None), None).wait(&at(500)).ok(), Some(None));
        // Zero is taken as MIN_WAIT: a recipe cannot spin the driver.
        let eager = Run::new(woken(Some(Duration::ZERO)), None);
        assert_eq!(eager.wait(&at(0)).ok(), Some(Some(MIN_WAIT)));
    }

    #[test]
    fn run_sends_the_stop_once_and_reads_on() {
        let probe = Probe {
            enough_at: Some(Duration::from_millis(300)),
            ..Probe::default()
        };
        let mut run = Run::new(probe, None);
        assert!(!run.after_read(at(100)));
        assert!(!run.stop_asked());
        assert!(run.after_read(at(300)));
        assert!(!run.after_read(at(400)));
        assert!(!run.after_read(at(500)));
        // Not asked again once it said yes.
        assert_eq!(run.recipe().enough_calls, 2);
        let (_, stop_asked, end) = run
            .finish(End::Stream(Outcome::Stopped { bytes: 10 }))
            .unwrap();
        assert!(stop_asked);
        assert!(end.contains("Stopped"), "{}", end);
    }

    #[test]
    fn run_abandons_when_the_recipe_says_so_after_its_stop() {
        let mut run = Run::new(Probe::default(), None);
        assert!(!run.after_read(at(0)));
        assert!(!run.abandoned());
        // A reader gone: enough (the stop is sent) and abandoned, in that order.
        run.recipe().abandon = true;
        run.recipe().enough_at = Some(Duration::ZERO);
        assert!(run.after_read(at(100)));
        assert!(run.abandoned());
        let (_, stop_asked, end) = run.finish(End::Failed(Error::Aborted)).unwrap();
        assert!(stop_asked);
        assert!(end.contains("Aborted"), "{}", end);
    }

    #[test]
    fn run_feeds_within_the_budget_and_fails_past_it() {
        let probe = Probe {
            max: Some(10),
            ..Probe::default()
        };
        let mut run = Run::new(probe, None);
        run.feed(&[0; 6]).unwrap();
        run.feed(&[0; 4]).unwrap();
        match run.feed(&[0; 1]) {
            Err(RecipeError::TooLarge { max_bytes: 10 }) => {}
            other => panic!("expected TooLarge, got {:?}", other.map(|_| ())),
        }
        assert_eq!(run.recipe().fed, 10);
    }
}
