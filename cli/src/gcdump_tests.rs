//! Tests of `gcdump`.

use super::*;

#[test]
fn the_pause_note_in_milliseconds() {
    let p = GcPause {
        gc: 1,
        suspend_ns: Some(9_870),
        gc_ns: 28_921_341,
        total_ns: 29_112_143,
    };
    assert_eq!(
        pause_note(&p),
        "dsipc: the runtime paused 29.1 ms for the heap walk (GC 28.9 ms)"
    );
}
