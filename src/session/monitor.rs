//! A reverse-port monitor's policy (`dsipc monitor`), without I/O: which runtimes were seen
//! (by cookie, a bounded number), which to resume once and which to hold
//! ([`ReverseBook`]); the open connections, the one holding each runtime and their accept
//! order, from which an engine picks the connection to close ([`ReverseConnections`]).

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::wire::Guid;

/// How many runtimes (cookies) a [`ReverseBook`] remembers by default; past that the oldest
/// is forgotten, so that a peer inventing cookies cannot grow memory without bound. A
/// forgotten runtime that advertises again is new again (and resumed again, which a running
/// runtime answers OK).
pub const REMEMBERED_RUNTIMES: usize = 65_536;

/// What to do with a runtime that advertised (the two things there are: an engine matches
/// both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvertiseAction {
    /// Send ResumeRuntime, then tell the book ([`ReverseBook::resume_done`]).
    Resume,
    /// Keep the connection open and idle (a closed one makes the runtime reconnect at once).
    Hold,
}

/// Which runtimes were seen and resumed, by cookie.
#[derive(Debug, Clone)]
pub struct ReverseBook {
    resume: bool,
    seen: BTreeSet<Guid>,
    /// `seen` in the order they came (oldest first).
    order: VecDeque<Guid>,
    /// A subset of `seen`.
    resumed: BTreeSet<Guid>,
    /// At most one per open connection.
    resuming: BTreeSet<Guid>,
    limit: usize,
}

impl ReverseBook {
    /// A book remembering [`REMEMBERED_RUNTIMES`]; `resume`: each runtime is resumed once.
    pub fn new(resume: bool) -> ReverseBook {
        ReverseBook::with_limit(resume, REMEMBERED_RUNTIMES)
    }

    /// A book remembering at most `limit` runtimes (at least 1).
    pub fn with_limit(resume: bool, limit: usize) -> ReverseBook {
        ReverseBook {
            resume,
            seen: BTreeSet::new(),
            order: VecDeque::new(),
            resumed: BTreeSet::new(),
            resuming: BTreeSet::new(),
            limit: limit.max(1),
        }
    }

    /// Runtime `cookie` advertised: whether it was seen before (a reconnect), and what to
    /// do. One resume at a time per runtime; a runtime resumed once is only held.
    pub fn advertised(&mut self, cookie: Guid) -> (bool, AdvertiseAction) {
        let reconnect = self.seen.contains(&cookie);
        if !reconnect {
            if self.order.len() >= self.limit {
                if let Some(old) = self.order.pop_front() {
                    self.seen.remove(&old);
                    self.resumed.remove(&old);
                }
            }
            self.seen.insert(cookie);
            self.order.push_back(cookie);
        }
        let action =
            if self.resume && !self.resumed.contains(&cookie) && self.resuming.insert(cookie) {
                AdvertiseAction::Resume
            } else {
                AdvertiseAction::Hold
            };
        (reconnect, action)
    }

    /// The outcome of runtime `cookie`'s resume; a failure is not remembered: the next
    /// Advertise tries again.
    pub fn resume_done(&mut self, cookie: Guid, resumed: bool) {
        self.resuming.remove(&cookie);
        if resumed && self.seen.contains(&cookie) {
            self.resumed.insert(cookie);
        }
    }

    /// Whether runtime `cookie`'s resume is in flight (its reconnect waits for the outcome).
    pub fn is_resuming(&self, cookie: &Guid) -> bool {
        self.resuming.contains(cookie)
    }

    /// How many runtimes are remembered.
    pub fn len(&self) -> usize {
        self.seen.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

/// An engine's state of one connection: the runtime it holds, if it holds one.
pub trait HoldsRuntime {
    /// The cookie of the runtime this connection holds.
    fn held_cookie(&self) -> Option<Guid>;
}

/// A monitor's open connections (by the engine's `Id`, each with its state `P`), the
/// runtimes they hold, and the [`ReverseBook`].
#[derive(Debug)]
pub struct ReverseConnections<Id, P> {
    /// Which runtimes were seen and resumed.
    pub book: ReverseBook,
    /// The open connections.
    pub open: BTreeMap<Id, P>,
    /// The connection holding each runtime.
    held: BTreeMap<Guid, Id>,
    /// Accept order: the next connection's number.
    next: u64,
}

impl<Id: Copy + Ord, P: HoldsRuntime> ReverseConnections<Id, P> {
    /// No connection yet; `resume`: each runtime is resumed once.
    pub fn new(resume: bool) -> Self {
        ReverseConnections {
            book: ReverseBook::new(resume),
            open: BTreeMap::new(),
            held: BTreeMap::new(),
            next: 0,
        }
    }

    /// The next connection's number in accept order (the oldest has the lowest).
    pub fn number(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }

    /// Forgets connection `id` (and the runtime it held): its state, if it was open.
    pub fn forget(&mut self, id: Id) -> Option<P> {
        let state = self.open.remove(&id)?;
        if let Some(cookie) = state.held_cookie() {
            if self.held.get(&cookie) == Some(&id) {
                self.held.remove(&cookie);
            }
        }
        Some(state)
    }

    /// Connection `id` holds the runtime `cookie`.
    pub fn hold(&mut self, cookie: Guid, id: Id) {
        self.held.insert(cookie, id);
    }

    /// The connection that held the runtime `cookie` (a newer one replaces it), which no
    /// longer holds it.
    pub fn unhold(&mut self, cookie: &Guid) -> Option<Id> {
        self.held.remove(cookie)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie(n: u32) -> Guid {
        Guid::from_fields(n, 0, 0, [0; 8])
    }

    #[test]
    fn resumes_once_holds_reconnects_and_remembers_a_bounded_number_of_runtimes() {
        let mut book = ReverseBook::with_limit(true, 2);
        assert_eq!(book.advertised(cookie(1)), (false, AdvertiseAction::Resume));
        // Its reconnect while the resume is in flight: held, not resumed twice.
        assert!(book.is_resuming(&cookie(1)));
        assert_eq!(book.advertised(cookie(1)), (true, AdvertiseAction::Hold));
        book.resume_done(cookie(1), true);
        assert!(!book.is_resuming(&cookie(1)));
        assert_eq!(book.advertised(cookie(1)).1, AdvertiseAction::Hold);
        // A failed resume is tried again at the next Advertise.
        assert_eq!(book.advertised(cookie(2)).1, AdvertiseAction::Resume);
        book.resume_done(cookie(2), false);
        assert_eq!(book.advertised(cookie(2)).1, AdvertiseAction::Resume);
        // A third runtime: the oldest is forgotten (memory stays bounded)...
        book.advertised(cookie(3));
        assert_eq!((book.len(), book.order.len()), (2, 2));
        assert!(book.resumed.is_empty());
        // ...and comes back as new.
        assert_eq!(book.advertised(cookie(1)), (false, AdvertiseAction::Resume));
        assert!(book.len() <= 2);
        // Without resuming nothing is ever resumed.
        let mut plain = ReverseBook::new(false);
        assert_eq!(plain.advertised(cookie(1)).1, AdvertiseAction::Hold);
    }

    struct Held(Option<Guid>);

    impl HoldsRuntime for Held {
        fn held_cookie(&self) -> Option<Guid> {
            self.0
        }
    }

    #[test]
    fn a_newer_connection_replaces_the_one_holding_a_runtime() {
        let mut conns: ReverseConnections<u64, Held> = ReverseConnections::new(false);
        let (a, b) = (conns.number(), conns.number());
        assert!(a < b);
        conns.open.insert(a, Held(Some(cookie(1))));
        conns.hold(cookie(1), a);
        // The runtime reconnects on b: a is let go, and forgetting it does not unhold b.
        conns.open.insert(b, Held(Some(cookie(1))));
        assert_eq!(conns.unhold(&cookie(1)), Some(a));
        conns.hold(cookie(1), b);
        assert!(conns.forget(a).is_some());
        assert_eq!(conns.unhold(&cookie(1)), Some(b));
        conns.hold(cookie(1), b);
        assert!(conns.forget(b).is_some());
        assert_eq!(conns.unhold(&cookie(1)), None);
        assert!(conns.forget(b).is_none());
    }
}
