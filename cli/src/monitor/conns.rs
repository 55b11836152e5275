//! What both monitor engines (reactor.rs and threads.rs, of which one is built) keep about
//! their open connections: the session layer's [`ReverseConnections`] (the runtimes seen,
//! the open connections, which connection holds each), and the reports made once.

use std::ops::{Deref, DerefMut};

use dsipc::session::{HoldsRuntime, ReverseConnections};

use super::{emit, Seen};

/// Open connections (by `Id`, with the engine's state `P`) and what was said of them.
pub(super) struct Conns<Id, P> {
    table: ReverseConnections<Id, P>,
    /// The cap was reached (reported once).
    cap_reported: bool,
    /// Standard output failed: the monitor stops.
    pub(super) stdout_gone: bool,
}

impl<Id, P> Deref for Conns<Id, P> {
    type Target = ReverseConnections<Id, P>;

    fn deref(&self) -> &Self::Target {
        &self.table
    }
}

impl<Id, P> DerefMut for Conns<Id, P> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.table
    }
}

impl<Id: Copy + Ord, P: HoldsRuntime> Conns<Id, P> {
    pub(super) fn new(resume: bool) -> Self {
        Conns {
            table: ReverseConnections::new(resume),
            cap_reported: false,
            stdout_gone: false,
        }
    }

    /// Prints `line` (once standard output failed, nothing more).
    pub(super) fn print(&mut self, line: &Seen, as_json: bool) {
        if !self.stdout_gone && !emit(line, as_json) {
            self.stdout_gone = true;
        }
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
