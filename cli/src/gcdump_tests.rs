//! Tests of `gcdump`.

use super::*;

fn stats() -> Vec<Row> {
    vec![
        Row {
            name: "System.Version".into(),
            count: 10_002,
            bytes: 320_064,
            retained: None,
        },
        Row {
            name: "Evil\u{1b}[2J\"".into(),
            count: 1,
            bytes: 24,
            retained: None,
        },
    ]
}

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

#[test]
fn thousands_separators() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(1000), "1,000");
    assert_eq!(thousands(1_234_567), "1,234,567");
}

#[test]
fn json_is_an_array_with_names_escaped() {
    assert_eq!(
        json(&stats()),
        "[{\"type\":\"System.Version\",\"count\":10002,\"bytes\":320064},{\"type\":\"Evil\\u001b[2J\\\"\",\"count\":1,\"bytes\":24}]\n"
    );
    assert_eq!(json(&[]), "[]\n");
}

#[test]
fn text_rows_have_names_cleaned() {
    let t = text((320_088, 10_003), &stats());
    assert_eq!(
        t,
        concat!(
            "        320,088  GC Heap bytes\n",
            "         10,003  GC Heap objects\n\n",
            "   Object Bytes      Count  Type\n",
            "        320,064     10,002  System.Version\n",
            "             24          1  Evil\\x1b[2J\"\n"
        )
    );
}

#[test]
fn retained_adds_a_column_and_a_field() {
    let mut rows = stats();
    rows[0].retained = Some(400_000);
    rows[1].retained = Some(24);
    let t = text((1, 1), &rows[..1]);
    assert!(t.ends_with(
        "   Object Bytes   Retained Bytes      Count  Type\n        320,064          400,000     10,002  System.Version\n"
    ), "{}", t);
    assert_eq!(
        json(&rows[..1]),
        "[{\"type\":\"System.Version\",\"count\":10002,\"bytes\":320064,\"retained\":400000}]\n"
    );
}
