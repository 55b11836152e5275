//! Optional time-ordered delivery.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

struct Entry<T> {
    timestamp: i64,
    arrival: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl<T> Eq for Entry<T> {}
impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.timestamp, self.arrival).cmp(&(other.timestamp, other.arrival))
    }
}

/// Reorders events by timestamp (ties in arrival order).
///
/// Events of one capture thread arrive in time order, but threads interleave by buffer. Push
/// each event ([`push`](Self::push)); an event flagged IsSorted means nothing later is earlier,
/// so [`release_until`](Self::release_until) its timestamp; at a sequence point (everything
/// before it has arrived) or at the end, [`release_all`](Self::release_all). Memory: the
/// events of one flush window (the runtime flushes about every 100 ms), never the whole trace.
pub struct TimeOrder<T> {
    heap: BinaryHeap<Reverse<Entry<T>>>,
    arrivals: u64,
}

impl<T> Default for TimeOrder<T> {
    fn default() -> Self {
        TimeOrder {
            heap: BinaryHeap::new(),
            arrivals: 0,
        }
    }
}

impl<T> TimeOrder<T> {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds `item` (stamped `timestamp`) until it is released.
    pub fn push(&mut self, timestamp: i64, item: T) {
        self.arrivals += 1;
        self.heap.push(Reverse(Entry {
            timestamp,
            arrival: self.arrivals,
            item,
        }));
    }

    /// Hands `out` every held item stamped at or before `timestamp`, in time order.
    pub fn release_until(&mut self, timestamp: i64, mut out: impl FnMut(i64, T)) {
        while self
            .heap
            .peek()
            .map_or(false, |Reverse(e)| e.timestamp <= timestamp)
        {
            if let Some(Reverse(e)) = self.heap.pop() {
                out(e.timestamp, e.item);
            }
        }
    }

    /// Hands `out` every held item, in time order.
    pub fn release_all(&mut self, mut out: impl FnMut(i64, T)) {
        while let Some(Reverse(e)) = self.heap.pop() {
            out(e.timestamp, e.item);
        }
    }

    /// Items held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_in_time_order() {
        let mut o = TimeOrder::new();
        o.push(30, "c");
        o.push(10, "a");
        o.push(20, "b");
        o.push(10, "a2");
        let mut got = Vec::new();
        o.release_until(15, |t, x| got.push((t, x)));
        assert_eq!(got, vec![(10, "a"), (10, "a2")]);
        o.push(25, "b2");
        o.release_all(|t, x| got.push((t, x)));
        assert_eq!(
            got,
            vec![(10, "a"), (10, "a2"), (20, "b"), (25, "b2"), (30, "c")]
        );
        assert!(o.is_empty());
    }
}
