//! What dsipc-std's and dsipc-tokio's trace sessions share: the [`StopSignal`] between a
//! session's stop handles and the reader of its stream, and the session's Debug form
//! ([`fmt_trace_session`]). Each adapter keeps its own wait (a thread, a task).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use dsipc::wire::Command;

use crate::Error;

/// How often a session read to its end with a stop predicate (both adapters'
/// `TraceSession::copy_to`) asks it while no data arrives: often enough that a stop on a
/// quiet stream goes out within a fifth of a second, rarely enough to cost nothing.
pub const STOP_POLL_TICK: std::time::Duration = std::time::Duration::from_millis(200);

/// What a session's stop handles tell the reader of its stream: when a stop was requested,
/// when the runtime answered it, or that it failed. Cheap to clone (all clones share it).
///
/// `I` is the adapter's instant (`std::time::Instant`, `tokio::time::Instant`): this
/// reads no clock, the callers pass `now`.
pub struct StopSignal<I> {
    session_id: u64,
    state: Arc<Mutex<StopState<I>>>,
}

struct StopState<I> {
    /// When the first stop was requested.
    requested_at: Option<I>,
    /// When a stop was answered.
    answered_at: Option<I>,
    /// A stop that failed: not sent, answered with an error, or not answered in time.
    failure: Option<Error>,
    /// The reader to wake when this state changes (an async reader's task).
    reader: Option<Waker>,
}

/// What the reader of a stream learns from [`StopSignal::take_news`]: when the stop was
/// requested and when it was answered, if it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StopNews<I> {
    /// When the first stop was requested.
    pub requested_at: Option<I>,
    /// When the runtime answered a stop.
    pub answered_at: Option<I>,
}

impl<I> Clone for StopSignal<I> {
    fn clone(&self) -> Self {
        StopSignal {
            session_id: self.session_id,
            state: Arc::clone(&self.state),
        }
    }
}

impl<I> fmt::Debug for StopSignal<I> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StopSignal")
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl<I: Copy> StopSignal<I> {
    /// The signal of session `session_id`, no stop requested yet.
    pub fn new(session_id: u64) -> Self {
        StopSignal {
            session_id,
            state: Arc::new(Mutex::new(StopState {
                requested_at: None,
                answered_at: None,
                failure: None,
                reader: None,
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, StopState<I>> {
        // Every update leaves the state consistent: a panic elsewhere does not poison it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The session this signal belongs to.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// True once a stop was requested (it may still be in flight).
    pub fn is_requested(&self) -> bool {
        self.lock().requested_at.is_some()
    }

    /// True once the runtime answered a stop.
    pub fn is_answered(&self) -> bool {
        self.lock().answered_at.is_some()
    }

    /// Marks a stop requested at `now` (the first request's time counts) and wakes the
    /// reader: from now on its waits are bounded. False when a stop was answered already:
    /// there is nothing left to send.
    pub fn request(&self, now: I) -> bool {
        let mut s = self.lock();
        if s.answered_at.is_some() {
            return false;
        }
        if s.requested_at.is_none() {
            s.requested_at = Some(now);
            wake(&mut s);
        }
        true
    }

    /// Records how a stop went: answered at `now`, or failed with `result`'s error (a
    /// copy: the caller keeps its own), which the reader reports next; wakes the reader.
    pub fn answer(&self, result: &Result<(), Error>, now: I) {
        let mut s = self.lock();
        match result {
            Ok(()) => {
                s.answered_at.get_or_insert(now);
            }
            Err(e) => s.failure = Some(e.duplicate()),
        }
        wake(&mut s);
    }

    /// For the reader: the failure of a stop (once), or when a stop was requested and
    /// answered. `waker`: the reader's, woken at the next change (an async reader's;
    /// `None` for a blocking one, which looks again after each wait).
    pub fn take_news(&self, waker: Option<&Waker>) -> Result<StopNews<I>, Error> {
        let mut s = self.lock();
        if let Some(w) = waker {
            match &s.reader {
                Some(r) if r.will_wake(w) => {}
                _ => s.reader = Some(w.clone()),
            }
        }
        if let Some(e) = s.failure.take() {
            return Err(e);
        }
        Ok(StopNews {
            requested_at: s.requested_at,
            answered_at: s.answered_at,
        })
    }
}

fn wake<I>(s: &mut StopState<I>) {
    if let Some(w) = s.reader.take() {
        w.wake();
    }
}

/// The Debug form of both adapters' `TraceSession`: its id, the command that started it
/// and the bytes received so far.
pub fn fmt_trace_session(
    f: &mut fmt::Formatter<'_>,
    session_id: u64,
    command: Command,
    bytes: u64,
) -> fmt::Result {
    f.debug_struct("TraceSession")
        .field("session_id", &session_id)
        .field("command", &command)
        .field("bytes", &bytes)
        .finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_requested_once_and_not_after_its_answer() {
        let signal = StopSignal::<u64>::new(7);
        assert!(signal.request(5));
        assert!(signal.request(9));
        assert_eq!(signal.take_news(None).unwrap().requested_at, Some(5));
        signal.answer(&Ok(()), 12);
        assert!(!signal.request(20));
        let news = signal.take_news(None).unwrap();
        assert_eq!((news.requested_at, news.answered_at), (Some(5), Some(12)));
    }

    #[test]
    fn a_failed_stop_is_reported_once() {
        let signal = StopSignal::<u64>::new(7);
        signal.request(1);
        signal.answer(&Err(Error::Aborted), 2);
        assert!(matches!(signal.take_news(None), Err(Error::Aborted)));
        assert_eq!(signal.take_news(None).unwrap().answered_at, None);
    }
}
