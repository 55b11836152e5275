//! What both monitor engines (reactor.rs and threads.rs, of which one is built) keep about
//! their open connections: the runtimes seen, the open connections, which connection holds
//! each runtime, and the reports made once.

use std::collections::HashMap;
use std::hash::Hash;

use dsipc::wire::Guid;

use super::{emit, Book, Seen};

/// An engine's state of one connection: the runtime it holds, if it holds one.
pub(super) trait Holds {
    /// The cookie of the runtime this connection holds.
    fn held_cookie(&self) -> Option<Guid>;
}

/// Open connections (by `Id`, with the engine's state `P`) and the runtimes they hold.
pub(super) struct Conns<Id, P> {
    /// Which runtimes were seen and resumed.
    pub(super) book: Book,
    /// The open connections.
    pub(super) open: HashMap<Id, P>,
    /// The connection holding each runtime.
    held: HashMap<Guid, Id>,
    /// Accept order: the next connection's number.
    next: u64,
    /// The cap was reached (reported once).
    cap_reported: bool,
    /// Standard output failed: the monitor stops.
    pub(super) stdout_gone: bool,
}

impl<Id: Copy + Eq + Hash, P: Holds> Conns<Id, P> {
    pub(super) fn new(resume: bool) -> Self {
        Conns {
            book: Book::new(resume),
            open: HashMap::new(),
            held: HashMap::new(),
            next: 0,
            cap_reported: false,
            stdout_gone: false,
        }
    }

    /// The next connection's number in accept order.
    pub(super) fn number(&mut self) -> u64 {
        self.next += 1;
        self.next - 1
    }

    /// Prints `line` (once standard output failed, nothing more).
    pub(super) fn print(&mut self, line: &Seen, as_json: bool) {
        if !self.stdout_gone && !emit(line, as_json) {
            self.stdout_gone = true;
        }
    }

    /// Forgets connection `id` (and the runtime it held).
    pub(super) fn forget(&mut self, id: Id) -> Option<P> {
        let state = self.open.remove(&id)?;
        if let Some(cookie) = state.held_cookie() {
            if self.held.get(&cookie) == Some(&id) {
                self.held.remove(&cookie);
            }
        }
        Some(state)
    }

    /// Connection `id` holds the runtime `cookie`.
    pub(super) fn hold(&mut self, cookie: Guid, id: Id) {
        self.held.insert(cookie, id);
    }

    /// The connection that held the runtime `cookie`, which it no longer holds.
    pub(super) fn unhold(&mut self, cookie: &Guid) -> Option<Id> {
        self.held.remove(cookie)
    }

    /// Says (the first time) that `cap` connections are open and what is done for each new
    /// one.
    pub(super) fn cap_reached(&mut self, cap: usize, what: &str) {
        if !self.cap_reported {
            self.cap_reported = true;
            eprintln!(
                "dsipc: holding {} connections (the cap); {} for each new one",
                cap, what
            );
        }
    }
}
