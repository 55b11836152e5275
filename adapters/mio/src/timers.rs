//! The deadlines of the session layer's calls and sessions: one min-heap of
//! `(time, owner)` on the reactor's clock ([`Millis`] from its epoch).
//!
//! A binary heap rather than a scan: with 1,000 calls in flight a scan would touch every
//! call at every wait, the heap touches `log n` entries per change. Entries are never
//! removed in place (a heap cannot): each owner remembers the one entry that counts
//! (`armed`), and the others are skipped when they come up. An owner pushes a new entry
//! only when its deadline moves earlier than the armed one (a call's deadline never
//! moves; a session's moves earlier at most twice: stop requested, stop answered) or
//! after its armed entry came up, so it has a few entries at most; finished owners'
//! entries are dropped when they come up, or by [`Timers::compact`] as soon as they
//! outnumber the live ones (so the heap holds at most `2 × live + 64` entries).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use dsipc::session::Millis;

/// Who a deadline, a connection or a pending drive belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Owner {
    /// A [`Control::call`](crate::Control::call).
    Call(u64),
    /// A [`Control::trace`](crate::Control::trace) session's own connection.
    Trace(u64),
    /// The stop of that session (its StopTracing call, on a second connection).
    Stop(u64),
}

/// Entries allowed beyond twice the live owners before the heap is compacted.
const SLACK: usize = 64;

#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Millis, Owner)>>,
}

impl Timers {
    /// Arms `owner` for `at` unless an entry at or before it is armed already (`armed`
    /// is the owner's record of its entry).
    pub(crate) fn arm(&mut self, owner: Owner, at: Option<Millis>, armed: &mut Option<Millis>) {
        if let Some(at) = at {
            if armed.map_or(true, |a| at < a) {
                self.heap.push(Reverse((at, owner)));
                *armed = Some(at);
            }
        }
    }

    /// The earliest entry (possibly a stale one: waking for it costs one early wake-up,
    /// after which it is gone).
    pub(crate) fn next(&self) -> Option<Millis> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Pops every entry due at `now`.
    pub(crate) fn due(&mut self, now: Millis) -> Vec<(Millis, Owner)> {
        let mut due = Vec::new();
        while let Some(Reverse((at, owner))) = self.heap.peek().copied() {
            if at > now {
                break;
            }
            self.heap.pop();
            due.push((at, owner));
        }
        due
    }

    /// Drops every entry `armed` does not recognise once stale entries may outnumber the
    /// live owners (`live` of them).
    pub(crate) fn compact(&mut self, live: usize, mut armed: impl FnMut(Owner) -> Option<Millis>) {
        if self.heap.len() <= live.saturating_mul(2).saturating_add(SLACK) {
            return;
        }
        self.heap
            .retain(|Reverse((at, owner))| armed(*owner) == Some(*at));
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_armed_once_until_its_deadline_moves_earlier() {
        let mut t = Timers::default();
        let mut armed = None;
        t.arm(Owner::Call(1), Some(100), &mut armed);
        t.arm(Owner::Call(1), Some(150), &mut armed);
        t.arm(Owner::Call(1), Some(100), &mut armed);
        assert_eq!(t.len(), 1);
        t.arm(Owner::Call(1), Some(50), &mut armed);
        assert_eq!((t.len(), armed), (2, Some(50)));
        assert_eq!(t.next(), Some(50));
        assert_eq!(t.due(49), []);
        assert_eq!(t.due(100), [(50, Owner::Call(1)), (100, Owner::Call(1))]);
        assert_eq!(t.next(), None);
    }

    #[test]
    fn stale_entries_are_compacted_once_they_outnumber_live_owners() {
        let mut t = Timers::default();
        for i in 0..200 {
            t.arm(Owner::Call(i), Some(1_000 + i), &mut None);
        }
        // Two owners left alive, one of which re-armed earlier.
        let armed = |o: Owner| match o {
            Owner::Call(7) => Some(1_007),
            Owner::Call(9) => Some(5),
            _ => None,
        };
        t.arm(Owner::Call(9), Some(5), &mut None);
        t.compact(2, armed);
        assert_eq!(t.len(), 2);
        assert_eq!(t.due(2_000), [(5, Owner::Call(9)), (1_007, Owner::Call(7))]);
    }
}
