//! Lost events, counted from gaps in the per-capture-thread sequence numbers.

use super::hash::FxHashMap;

/// Capture threads followed at most (a real process has a few thousand; a hostile sequence
/// point may list millions).
pub const MAX_CAPTURE_THREADS: usize = 1 << 16;

/// Counts events the runtime dropped (buffers full) from sequence-number gaps.
///
/// Every event of a capture thread carries the next sequence number of that thread (the first
/// is 1); a sequence point lists each thread's last number. A jump forward is the number of
/// events lost. Memory: one entry per capture thread, at most [`MAX_CAPTURE_THREADS`]
/// (threads past it are not followed: [`untracked`](Self::untracked) counts their events).
#[derive(Debug, Default, Clone)]
pub struct LostEvents {
    last: FxHashMap<u64, u32>,
    untracked: u64,
    /// The last event's thread and its number: consecutive events mostly share a capture
    /// thread, so most events need no map lookup. The map's entry for it may be stale.
    current: Option<(u64, u32)>,
    lost: u64,
}

impl LostEvents {
    /// An empty counter.
    pub fn new() -> Self {
        Self::default()
    }

    /// An event (not a metadata record) with sequence number `seq` from `capture_thread`.
    #[inline]
    pub fn on_event(&mut self, capture_thread: u64, seq: u32) {
        let prev = match self.current {
            Some((t, prev)) if t == capture_thread => prev,
            _ => {
                self.store_current();
                match self.last.get(&capture_thread) {
                    Some(&p) => p,
                    None if self.last.len() >= MAX_CAPTURE_THREADS => {
                        self.untracked += 1;
                        return;
                    }
                    None => {
                        self.last.insert(capture_thread, 0);
                        0
                    }
                }
            }
        };
        if seq > prev {
            self.lost += u64::from(seq - prev - 1);
        }
        self.current = Some((capture_thread, seq));
    }

    /// Writes the cached thread's number back to the map.
    fn store_current(&mut self) {
        if let Some((t, seq)) = self.current.take() {
            self.last.insert(t, seq);
        }
    }

    /// One thread entry of a sequence point: `seq` is the last number the thread wrote.
    pub fn on_sequence_point(&mut self, capture_thread: u64, seq: u32) {
        self.store_current();
        if !self.last.contains_key(&capture_thread) && self.last.len() >= MAX_CAPTURE_THREADS {
            return;
        }
        let prev = self.last.entry(capture_thread).or_insert(0);
        if seq > *prev {
            self.lost += u64::from(seq - *prev);
            *prev = seq;
        }
    }

    /// Events lost so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Capture threads followed so far.
    pub fn threads(&self) -> usize {
        self.last.len()
    }

    /// Events of capture threads past [`MAX_CAPTURE_THREADS`] (not checked for gaps).
    pub fn untracked(&self) -> u64 {
        self.untracked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_and_sequence_points() {
        let mut l = LostEvents::new();
        l.on_event(7, 1);
        l.on_event(7, 2);
        assert_eq!(l.lost(), 0);
        l.on_event(7, 5); // 3 and 4 lost
        assert_eq!(l.lost(), 2);
        l.on_sequence_point(7, 5);
        assert_eq!(l.lost(), 2);
        l.on_sequence_point(7, 8); // 6..8 never arrived
        assert_eq!(l.lost(), 5);
        l.on_event(9, 3); // a new thread starting at 3: 1 and 2 lost
        assert_eq!(l.lost(), 7);
        assert_eq!(l.threads(), 2);
    }

    #[test]
    fn interleaved_threads() {
        let mut l = LostEvents::new();
        l.on_event(7, 1);
        l.on_event(9, 1);
        l.on_event(7, 3); // 2 lost
        l.on_event(9, 2);
        l.on_event(9, 3);
        assert_eq!(l.lost(), 1);
        // Thread 9 is the cached one: the sequence point sees its last number.
        l.on_sequence_point(9, 3);
        l.on_sequence_point(7, 3);
        assert_eq!(l.lost(), 1);
        l.on_event(9, 4);
        l.on_sequence_point(9, 6); // 5 and 6 never arrived
        assert_eq!(l.lost(), 3);
        assert_eq!(l.threads(), 2);
    }
}
