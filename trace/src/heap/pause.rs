//! The runtime's own pause for the heap walk, from the GC keyword's events the heap session
//! brings with the walk (`Microsoft-Windows-DotNETRuntime`, keyword GC 0x1, level 5):
//!
//! - GCSuspendEEBegin (9): the runtime starts suspending its threads;
//! - GCSuspendEEEnd (8): they are suspended;
//! - GCStart (1) / GCEnd (2): the walked GC (the heap walk happens between them);
//! - GCRestartEEBegin (7) / GCRestartEEEnd (3): the threads are resumed.
//!
//! Only the events' timestamps are used (QPC ticks, converted with the trace header's
//! frequency), never their payloads. The pause is that of the suspension containing the
//! walked GC: the last GCSuspendEEBegin at or before its GCStart (with no GCRestartEEEnd
//! between them: that one would be an earlier suspension's), to the first GCRestartEEEnd at
//! or after its GCEnd. Events of other threads may come in the stream before or after the
//! walked GC's, so marks are kept whatever their order, in bounded queues.

use std::collections::VecDeque;
use std::fmt;

/// The walked GC's timeline (see [`super::HeapGraph::pause`]): durations in nanoseconds
/// from the runtime's own GC events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcPause {
    /// The walked GC's number.
    pub gc: u32,
    /// The time the runtime took to suspend its threads: GCSuspendEEBegin to
    /// GCSuspendEEEnd; `None` if no GCSuspendEEEnd came between the suspension's begin and
    /// the GC's start.
    pub suspend_ns: Option<u64>,
    /// The GC's own duration, heap walk included: GCStart to GCEnd.
    pub gc_ns: u64,
    /// The whole pause, the time the runtime's managed threads were stopped:
    /// GCSuspendEEBegin to GCRestartEEEnd. At least [`GcPause::gc_ns`].
    pub total_ns: u64,
}

/// `the runtime paused 29.1 ms for the heap walk (GC 28.9 ms)`: what `dsipc gcdump` says
/// after the walk (dotnet-gcdump does not say it).
impl fmt::Display for GcPause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |ns: u64| ns as f64 / 1e6;
        write!(
            f,
            "the runtime paused {:.1} ms for the heap walk (GC {:.1} ms)",
            ms(self.total_ns),
            ms(self.gc_ns)
        )
    }
}

/// At most this many marks of one kind are kept before the walked GC is placed (the
/// oldest dropped first): the session's GCs before the walked one, a few in practice.
const MAX_MARKS: usize = 256;

/// Collects the marks as the events come; [`PauseTracker::result`] places them.
#[derive(Debug, Default)]
pub(crate) struct PauseTracker {
    /// The walked GC: its number and GCStart timestamp.
    start: Option<(u32, i64)>,
    /// Its GCEnd timestamp.
    end: Option<i64>,
    suspend_begins: VecDeque<i64>,
    suspend_ends: VecDeque<i64>,
    restart_ends: VecDeque<i64>,
    /// The earliest GCRestartEEEnd at or after the walked GC's end (once that is known).
    restart_after_end: Option<i64>,
}

fn push(q: &mut VecDeque<i64>, ts: i64) {
    if q.len() >= MAX_MARKS {
        q.pop_front();
    }
    q.push_back(ts);
}

impl PauseTracker {
    /// The walked GC started (GCStart of GC `gc` at `ts`).
    pub(crate) fn on_gc_start(&mut self, gc: u32, ts: i64) {
        if self.start.is_none() {
            self.start = Some((gc, ts));
            // Suspension marks after the start are of later suspensions.
            self.suspend_begins.retain(|&t| t <= ts);
            self.suspend_ends.retain(|&t| t <= ts);
        }
    }

    /// The walked GC ended (its GCEnd at `ts`).
    pub(crate) fn on_gc_end(&mut self, ts: i64) {
        if self.end.is_none() && self.start.is_some() {
            self.end = Some(ts);
            let start = self.start.map_or(i64::MIN, |s| s.1);
            let mut after = None;
            self.restart_ends.retain(|&t| {
                if t >= ts {
                    after = Some(after.map_or(t, |a: i64| a.min(t)));
                }
                t <= start
            });
            self.restart_after_end = after;
        }
    }

    /// A GCSuspendEEBegin at `ts`.
    pub(crate) fn on_suspend_begin(&mut self, ts: i64) {
        if self.start.map_or(true, |(_, s)| ts <= s) {
            push(&mut self.suspend_begins, ts);
        }
    }

    /// A GCSuspendEEEnd at `ts`.
    pub(crate) fn on_suspend_end(&mut self, ts: i64) {
        if self.start.map_or(true, |(_, s)| ts <= s) {
            push(&mut self.suspend_ends, ts);
        }
    }

    /// A GCRestartEEEnd at `ts`.
    pub(crate) fn on_restart_end(&mut self, ts: i64) {
        match (self.start, self.end) {
            (Some((_, s)), Some(e)) => {
                if ts >= e {
                    self.restart_after_end = Some(self.restart_after_end.map_or(ts, |a| a.min(ts)));
                } else if ts <= s {
                    push(&mut self.restart_ends, ts);
                }
            }
            _ => push(&mut self.restart_ends, ts),
        }
    }

    /// The pause, if its events came and fit together; `qpc_frequency` ticks a second.
    pub(crate) fn result(&self, qpc_frequency: i64) -> Option<GcPause> {
        let (gc, start) = self.start?;
        let end = self.end?;
        if end < start {
            return None;
        }
        let begin = self
            .suspend_begins
            .iter()
            .copied()
            .filter(|&t| t <= start)
            .max()?;
        // A restart between the begin and the GC: the begin is an earlier suspension's.
        if self.restart_ends.iter().any(|&t| t > begin && t <= start) {
            return None;
        }
        let restart = self.restart_after_end?;
        let suspended = self
            .suspend_ends
            .iter()
            .copied()
            .filter(|&t| t >= begin && t <= start)
            .min();
        let ns = |from: i64, to: i64| ticks_to_ns(i128::from(to) - i128::from(from), qpc_frequency);
        Some(GcPause {
            gc,
            suspend_ns: match suspended {
                Some(t) => Some(ns(begin, t)?),
                None => None,
            },
            gc_ns: ns(start, end)?,
            total_ns: ns(begin, restart)?,
        })
    }
}

/// `ticks` (not negative) at `frequency` ticks a second as nanoseconds (saturating);
/// `None` for a frequency that is not positive.
fn ticks_to_ns(ticks: i128, frequency: i64) -> Option<u64> {
    if frequency <= 0 || ticks < 0 {
        return None;
    }
    let ns = ticks.saturating_mul(1_000_000_000) / i128::from(frequency);
    Some(u64::try_from(ns).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 MHz: a tick is 100 ns.
    const FREQ: i64 = 10_000_000;

    #[test]
    fn the_suspension_around_the_walked_gc() {
        let mut p = PauseTracker::default();
        // An earlier GC's suspension, whole.
        p.on_suspend_begin(100);
        p.on_suspend_end(110);
        p.on_restart_end(200);
        // The walked GC's: begin 1000, suspended 1050, GC 1100..9100, restarted 9300.
        p.on_suspend_begin(1000);
        p.on_suspend_end(1050);
        p.on_gc_start(7, 1100);
        p.on_gc_end(9100);
        p.on_restart_end(9300);
        // A later GC's, after.
        p.on_suspend_begin(20_000);
        p.on_restart_end(20_500);
        assert_eq!(
            p.result(FREQ),
            Some(GcPause {
                gc: 7,
                suspend_ns: Some(5_000),
                gc_ns: 800_000,
                total_ns: 830_000,
            })
        );
        // No frequency, no durations.
        assert_eq!(p.result(0), None);
        assert_eq!(p.result(-5), None);
    }

    #[test]
    fn marks_in_any_stream_order() {
        // Other threads' buffers: the restart before the GC's end, the suspension after its
        // start, in the stream.
        let mut p = PauseTracker::default();
        p.on_restart_end(9300);
        p.on_gc_start(3, 1100);
        p.on_suspend_begin(1000);
        p.on_suspend_begin(5000);
        p.on_gc_end(9100);
        p.on_restart_end(9_999);
        let r = p.result(FREQ).unwrap();
        assert_eq!(
            (r.gc, r.suspend_ns, r.gc_ns, r.total_ns),
            (3, None, 800_000, 830_000)
        );
    }

    #[test]
    fn missing_or_misplaced_events_give_none() {
        // No suspension begin.
        let mut p = PauseTracker::default();
        p.on_gc_start(1, 100);
        p.on_gc_end(200);
        p.on_restart_end(300);
        assert_eq!(p.result(FREQ), None);
        // No restart after the end.
        let mut p = PauseTracker::default();
        p.on_suspend_begin(50);
        p.on_gc_start(1, 100);
        p.on_gc_end(200);
        assert_eq!(p.result(FREQ), None);
        // The begin is an earlier suspension's (restarted before the GC).
        let mut p = PauseTracker::default();
        p.on_suspend_begin(50);
        p.on_restart_end(60);
        p.on_gc_start(1, 100);
        p.on_gc_end(200);
        p.on_restart_end(300);
        assert_eq!(p.result(FREQ), None);
        // No GC.
        let mut p = PauseTracker::default();
        p.on_suspend_begin(50);
        p.on_restart_end(300);
        assert_eq!(p.result(FREQ), None);
        // An end before its start.
        let mut p = PauseTracker::default();
        p.on_suspend_begin(50);
        p.on_gc_start(1, 100);
        p.on_gc_end(90);
        p.on_restart_end(300);
        assert_eq!(p.result(FREQ), None);
    }

    #[test]
    fn hostile_timestamps_neither_panic_nor_grow() {
        let mut p = PauseTracker::default();
        for i in 0..10_000i64 {
            p.on_suspend_begin(i64::MIN + i);
            p.on_suspend_end(i64::MAX - i);
            p.on_restart_end(if i % 2 == 0 { i64::MIN } else { i64::MAX });
        }
        assert!(p.suspend_begins.len() <= MAX_MARKS);
        assert!(p.suspend_ends.len() <= MAX_MARKS);
        assert!(p.restart_ends.len() <= MAX_MARKS);
        p.on_gc_start(u32::MAX, i64::MIN);
        p.on_gc_end(i64::MAX);
        for _ in 0..10_000 {
            p.on_restart_end(i64::MAX);
            p.on_suspend_begin(i64::MIN);
        }
        assert!(p.suspend_begins.len() <= MAX_MARKS);
        assert!(p.restart_ends.len() <= MAX_MARKS);
        let r = p.result(1).unwrap();
        assert_eq!(r.gc_ns, u64::MAX);
        assert_eq!(r.total_ns, u64::MAX);
        // (2^64 - 1) ticks at (2^63 - 1) a second: just over 2 s.
        assert_eq!(p.result(i64::MAX).unwrap().gc_ns, 2_000_000_000);
    }

    #[test]
    fn ticks_convert_exactly() {
        assert_eq!(ticks_to_ns(1, 1_000_000_000), Some(1));
        assert_eq!(ticks_to_ns(3, 3), Some(1_000_000_000));
        assert_eq!(ticks_to_ns(-1, 3), None);
        assert_eq!(ticks_to_ns(1, 0), None);
    }

    #[test]
    fn the_pause_is_said_in_milliseconds() {
        let p = GcPause {
            gc: 1,
            suspend_ns: Some(9_870),
            gc_ns: 28_921_341,
            total_ns: 29_112_143,
        };
        assert_eq!(
            p.to_string(),
            "the runtime paused 29.1 ms for the heap walk (GC 28.9 ms)"
        );
    }
}
