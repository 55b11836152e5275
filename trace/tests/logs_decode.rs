//! The logs decoder over synthetic `Microsoft-Extensions-Logging` sessions (built to the
//! layouts of LoggingEventSource's events): entries, arguments, exceptions, scopes, the
//! three writers, chunking invariance, damaged streams and hostile sizes.

mod common_logs;

use std::time::{Duration, UNIX_EPOCH};

use common_logs::{payload, sample, LogTrace, F, MESSAGE_JSON, SCOPE_START};
use dsipc_trace::logs::{
    LogDecoder, LogEntry, LogFormat, LogLevel, LogValue, Malformed, MAX_ARGUMENTS, MAX_OPEN_SCOPES,
    MAX_SCOPE_BYTES, MAX_SCOPE_DEPTH, MAX_STRING,
};
use dsipc_trace::StreamError;

fn decode_chunked(
    bytes: &[u8],
    chunk: usize,
) -> (Vec<LogEntry>, LogDecoder, Result<(), StreamError>) {
    let mut d = LogDecoder::new();
    let mut out = Vec::new();
    let mut result = Ok(());
    for c in bytes.chunks(chunk) {
        if let Err(e) = d.feed(c, &mut |e| out.push(e)) {
            result = Err(e);
            break;
        }
    }
    if result.is_ok() {
        result = d.finish(&mut |e| out.push(e));
    }
    (out, d, result)
}

fn decode(bytes: &[u8]) -> (Vec<LogEntry>, LogDecoder) {
    let (out, d, r) = decode_chunked(bytes, bytes.len().max(1));
    r.unwrap();
    (out, d)
}

fn s(v: &str) -> LogValue {
    LogValue::String(v.into())
}

#[test]
fn logs_entries_arguments_exceptions_and_scopes() {
    let (entries, d) = decode(&sample().bytes());
    assert_eq!(d.stats().malformed, 0, "{:?}", d.stats());
    assert_eq!(entries.len(), 2, "{:?}", entries);
    let a = &entries[0];
    assert_eq!(a.level, LogLevel::Information);
    assert_eq!(a.category, "App.Worker");
    assert_eq!(a.event_id, 42);
    assert_eq!(a.event_name, "Processing");
    assert_eq!(a.message, "Processing request 353f in 12 ms");
    assert_eq!(a.exception, None);
    assert_eq!(
        a.arguments,
        vec![
            ("Id".into(), s("353f")),
            ("Elapsed".into(), s("12")),
            (
                "{OriginalFormat}".into(),
                s("Processing request {Id} in {Elapsed} ms")
            ),
        ]
    );
    assert_eq!(
        a.scopes,
        vec![
            vec![
                ("RequestId".into(), s("r-1")),
                ("Attempt".into(), LogValue::Number(2))
            ],
            vec![
                ("Path".into(), s("/a")),
                ("Ok".into(), LogValue::Bool(true))
            ],
        ]
    );
    // Event 5 of the stream (the writer's events are a second apart from 12.500).
    assert_eq!(
        a.timestamp.duration_since(UNIX_EPOCH).unwrap().as_millis() % 60_000,
        17_500
    );
    let b = &entries[1];
    assert_eq!(b.level, LogLevel::Error);
    assert_eq!(b.event_name, "");
    assert_eq!(
        b.message, "It failed \"badly\"",
        "no format: the FormattedMessage"
    );
    assert_eq!(
        b.arguments,
        vec![
            ("Table".into(), s("users")),
            ("Rows".into(), LogValue::Number(3))
        ]
    );
    assert_eq!(
        b.exception.as_deref(),
        Some("System.InvalidOperationException: boom\n   at App.Db.Run()")
    );
    assert!(b.scopes.is_empty(), "the scopes were closed");
    assert!(b.timestamp > a.timestamp);
}

#[test]
fn logs_writers_as_dotnet_monitor() {
    let (entries, _) = decode(&sample().bytes());
    let mut nd = String::new();
    let mut seq = String::new();
    let mut text = String::new();
    for e in &entries {
        LogFormat::NdJson.write(e, &mut nd);
        LogFormat::JsonSeq.write(e, &mut seq);
        LogFormat::Text.write(e, &mut text);
    }
    let lines: Vec<&str> = nd.lines().collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(
        lines[0],
        concat!(
            r#"{"Timestamp":"2024-05-22 10:11:17Z","LogLevel":"Information","EventId":42,"#,
            r#""EventName":"Processing","Category":"App.Worker","#,
            r#""Message":"Processing request 353f in 12 ms","#,
            r#""State":{"Message":"Processing request 353f in 12 ms","Id":"353f","Elapsed":"12","#,
            r#""{OriginalFormat}":"Processing request {Id} in {Elapsed} ms"},"#,
            r#""Scopes":[{"RequestId":"r-1","Attempt":2},{"Path":"/a","Ok":true}]}"#
        )
    );
    assert!(lines[1].contains(r#""Message":"It failed \"badly\"","Exception":"System.InvalidOperationException: boom\n   at App.Db.Run()","State":{"Message":"It failed \"badly\"","Table":"users","Rows":3}}"#), "{}", lines[1]);
    assert!(!lines[1].contains("Scopes"));
    // json-seq: each record after a record separator, ended by a newline.
    let records: Vec<&str> = seq.split('\u{1e}').collect();
    assert_eq!(records[0], "");
    assert_eq!(records.len(), 3);
    for (r, l) in records[1..].iter().zip(&lines) {
        assert_eq!(*r, format!("{}\n", l));
    }
    assert_eq!(
        text,
        concat!(
            "2024-05-22 10:11:17Z info: App.Worker[42][Processing]\n",
            "      => RequestId:r-1, Attempt:2 => Path:/a, Ok:True\n",
            "      Processing request 353f in 12 ms\n",
            "2024-05-22 10:11:21Z fail: App.Db[0]\n",
            "      It failed \"badly\"\n",
            "      System.InvalidOperationException: boom\n",
            "         at App.Db.Run()\n",
        )
    );
}

#[test]
fn logs_formats_without_holes_missing_values_and_the_swapped_columns() {
    let mut t = LogTrace::new();
    // A format without holes: the message is the format as written.
    t.log(
        1,
        3,
        "C",
        1,
        "E",
        "x {{y}}",
        r#"{"{OriginalFormat}":"x {{y}}"}"#,
        "{}",
    );
    // A hole without its value: "(null)", the argument null.
    t.log(
        1,
        0,
        "C",
        2,
        "",
        "?",
        r#"{"{OriginalFormat}":"v={V}"}"#,
        "{}",
    );
    // No ArgumentsJson: no entry (dotnet-monitor skips it).
    t.log(1, 5, "C", 3, "", "skipped", "", "{}");
    // Runtimes whose MessageJson lacks EventName: dotnet-monitor shifts the columns.
    t.raw(
        MESSAGE_JSON,
        1,
        payload(&[
            F::I(1),
            F::I(1),
            F::S("C"),
            F::I(4),
            F::S("{}"),
            F::S(r#"{"{OriginalFormat}":"shifted {A}","A":"a"}"#),
            F::S(""),
            F::S(""),
            F::S(""),
            F::S(""),
            F::S(""),
        ]),
    );
    let (e, d) = decode(&t.bytes());
    assert_eq!(d.stats().malformed, 0, "{:?}", d.stats());
    assert_eq!(e.len(), 3, "{:?}", e);
    assert_eq!(e[0].message, "x {{y}}");
    assert_eq!(e[0].level, LogLevel::Warning);
    assert_eq!(
        e[0].arguments,
        vec![("{OriginalFormat}".into(), s("x {{y}}"))]
    );
    assert_eq!(e[1].message, "v=(null)");
    assert_eq!(e[1].level, LogLevel::Trace);
    assert_eq!(
        e[1].arguments,
        vec![
            ("V".into(), LogValue::Null),
            ("{OriginalFormat}".into(), s("v={V}"))
        ]
    );
    assert_eq!(e[2].message, "shifted a");
    assert_eq!(e[2].event_name, "");
    assert_eq!(e[2].exception, None);
}

#[test]
fn logs_decode_the_same_whatever_the_chunking() {
    let mut t = sample();
    t.per_block = 3;
    for i in 0..40 {
        t.log(
            2 + i % 3,
            i as i32 % 6,
            "App.Loop",
            i as i32,
            "",
            "",
            &format!(r#"{{"I":"{}","{{OriginalFormat}}":"item {{I}}"}}"#, i),
            "{}",
        );
    }
    let bytes = t.bytes();
    let (whole, d) = decode(&bytes);
    assert_eq!(whole.len(), 42);
    assert_eq!(whole[41].message, "item 39");
    for chunk in [1, 7, 64, 4096] {
        let (got, d2, r) = decode_chunked(&bytes, chunk);
        r.unwrap();
        assert_eq!(got, whole, "chunk {}", chunk);
        assert_eq!(d2.stats(), d.stats());
    }
}

#[test]
fn logs_truncated_and_corrupt_streams_are_errors_with_offsets() {
    let bytes = sample().bytes();
    let (whole, _) = decode(&bytes);
    // Cut inside the last block: what came before is delivered, the end is a truncation.
    let cut = &bytes[..bytes.len() - 20];
    let (got, _, r) = decode_chunked(cut, 5);
    let e = r.unwrap_err();
    assert!(e.is_truncation(), "{}", e);
    assert_eq!(e.offset(), cut.len() as u64);
    assert!(got.len() <= whole.len());
    // A bad tag where the first block's object begins: a parse error naming its offset.
    let at = bytes
        .windows(13)
        .position(|w| w == b"MetadataBlock")
        .unwrap()
        - 4 // name length
        - 8 // version, minimum version
        - 3; // BeginPrivateObject x2, NullReference
    let mut bad = bytes.clone();
    bad[at] = 0x42;
    let (got, _, r) = decode_chunked(&bad, 1);
    let e = r.unwrap_err();
    assert!(!e.is_truncation(), "{}", e);
    assert_eq!(e.offset(), at as u64, "{}", e);
    assert!(got.is_empty());
    // After the error, more bytes are refused the same way.
    let mut d = LogDecoder::new();
    assert!(d.feed(&bad, &mut |_| {}).is_err());
    assert!(d.feed(b"more", &mut |_| {}).is_err());
}

#[test]
fn logs_hostile_sizes_are_malformed_and_bounded() {
    let mut t = LogTrace::new();
    t.per_block = 4;
    // A message past MAX_STRING.
    let huge = "m".repeat(MAX_STRING + 1);
    t.log(1, 2, "C", 1, "", &huge, r#"{"A":"1"}"#, "{}");
    // Arguments past MAX_ARGUMENTS.
    let many = format!(
        "{{{}}}",
        (0..=MAX_ARGUMENTS)
            .map(|i| format!("\"k{}\":\"v\"", i))
            .collect::<Vec<_>>()
            .join(",")
    );
    t.log(1, 2, "C", 2, "", "", &many, "{}");
    // JSON nested past the depth limit, and JSON that does not parse.
    let deep = format!("{{\"a\":{}{}}}", "[".repeat(1000), "]".repeat(1000));
    t.log(1, 2, "C", 3, "", "", &deep, "{}");
    t.log(1, 2, "C", 4, "", "", "{\"a\":", "{}");
    // A level that is not a LogLevel; a payload cut short.
    t.log(1, 9, "C", 5, "", "", "{}", "{}");
    t.raw(MESSAGE_JSON, 1, payload(&[F::I(2), F::I(1)]));
    // A scope that does not parse.
    t.raw(
        SCOPE_START,
        1,
        payload(&[F::I(1), F::I(1), F::S("C"), F::S("[")]),
    );
    // One good entry after them.
    t.log(1, 2, "C", 6, "", "ok", r#"{"{OriginalFormat}":"ok"}"#, "{}");
    let (e, d) = decode(&t.bytes());
    assert_eq!(e.len(), 1, "{:?}", d.stats());
    assert_eq!(e[0].event_id, 6);
    assert_eq!(
        d.stats().malformed,
        8,
        "the long message in both events: {:?}",
        d.stats()
    );
    assert_eq!(d.stats().entries, 1);
    assert!(matches!(
        d.stats().last_malformed,
        Some(Malformed::Json {
            field: "ArgumentsJson",
            ..
        })
    ));

    // Scopes: a thread never closing its scopes holds MAX_SCOPE_DEPTH; all threads together
    // MAX_OPEN_SCOPES; the rest are counted, and entries carry the scopes held.
    let mut t = LogTrace::new();
    t.per_block = 1000;
    for i in 0..(MAX_SCOPE_DEPTH as i32 + 10) {
        t.scope_start(1, i, "C", &format!(r#"{{"S":"{}"}}"#, i));
    }
    t.log(
        1,
        2,
        "C",
        1,
        "",
        "deep",
        r#"{"{OriginalFormat}":"deep"}"#,
        "{}",
    );
    let threads = (MAX_OPEN_SCOPES + 5) as u64;
    for th in 0..threads {
        t.scope_start(100 + th, 1_000_000 + th as i32, "C", "{}");
    }
    let (e, d) = decode(&t.bytes());
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].scopes.len(), MAX_SCOPE_DEPTH);
    assert_eq!(e[0].scopes[0], vec![("S".into(), s("0"))]);
    assert_eq!(
        d.stats().scopes_dropped,
        10 + (threads - (MAX_OPEN_SCOPES - MAX_SCOPE_DEPTH) as u64),
        "{:?}",
        d.stats()
    );
    assert_eq!(d.stats().malformed, 0);
}

#[test]
fn logs_scope_stops_find_scopes_that_moved_threads() {
    let mut t = LogTrace::new();
    t.scope_start(1, 10, "C", r#"{"Outer":"o"}"#);
    t.scope_start(1, 11, "C", r#"{"Inner":"i"}"#);
    // The inner scope ends on another thread (after an await).
    t.scope_stop(2, 11, "C");
    t.log(1, 2, "C", 1, "", "m", r#"{"{OriginalFormat}":"m"}"#, "{}");
    t.scope_stop(1, 10, "C");
    t.log(1, 2, "C", 2, "", "m", r#"{"{OriginalFormat}":"m"}"#, "{}");
    let (e, _) = decode(&t.bytes());
    assert_eq!(e[0].scopes, vec![vec![("Outer".into(), s("o"))]]);
    assert!(e[1].scopes.is_empty());
    let _ = Duration::from_secs(0);
}

/// Scopes follow activity ids (TplEventSource's TasksFlowActivityIds), as dotnet-monitor's do:
/// each ActivityJsonStart branches an activity whose related id is its enclosing scope's, an
/// entry carries its innermost scope's activity id on whatever thread it resumed, and a
/// scope is forgotten at the stop carrying its activity id.
#[test]
fn logs_scopes_follow_activity_ids_across_threads() {
    use common_logs::activity;
    let nil = [0u8; 16];
    let mut t = LogTrace::new();
    // A request scope (activity 1), then a nested one (activity 2, branched from 1), both
    // opened on thread 1.
    t.activity = (activity(1), nil);
    t.scope_start(1, 10, "C", r#"{"RequestId":"r-1"}"#);
    t.activity = (activity(2), activity(1));
    t.scope_start(1, 11, "C", r#"{"Step":"load"}"#);
    // After an await, on thread 2: the entry carries the inner scope's activity.
    t.activity = (activity(2), nil);
    t.log(2, 2, "C", 1, "", "a", r#"{"{OriginalFormat}":"a"}"#, "{}");
    // Thread 1, no scope of its own: a log outside any activity has no scopes, though
    // thread 1 opened both.
    t.activity = (nil, nil);
    t.log(1, 2, "C", 2, "", "b", r#"{"{OriginalFormat}":"b"}"#, "{}");
    // A new activity branched from 2 that no start announced (another session's start):
    // found by its related id.
    t.activity = (activity(9), activity(2));
    t.log(3, 2, "C", 3, "", "c", r#"{"{OriginalFormat}":"c"}"#, "{}");
    // The inner scope stops (on thread 3): an entry in the request scope has that one only.
    t.activity = (activity(2), activity(1));
    t.scope_stop(3, 11, "C");
    t.activity = (activity(1), nil);
    t.log(3, 2, "C", 4, "", "d", r#"{"{OriginalFormat}":"d"}"#, "{}");
    t.scope_stop(1, 10, "C");
    t.log(3, 2, "C", 5, "", "e", r#"{"{OriginalFormat}":"e"}"#, "{}");
    let (e, d) = decode(&t.bytes());
    let request = vec![("RequestId".to_string(), s("r-1"))];
    let step = vec![("Step".to_string(), s("load"))];
    assert_eq!(e.len(), 5);
    assert_eq!(e[0].scopes, vec![request.clone(), step.clone()]);
    assert!(e[1].scopes.is_empty());
    assert_eq!(e[2].scopes, vec![request.clone(), step]);
    assert_eq!(e[3].scopes, vec![request]);
    assert!(e[4].scopes.is_empty());
    assert_eq!(d.stats().scopes_dropped, 0);
    // Whatever the chunking (the activity ids come from the parser, however it is fed).
    let bytes = t.bytes();
    for chunk in [1, 7, 64] {
        let (again, _, r) = decode_chunked(&bytes, chunk);
        r.unwrap();
        assert_eq!(again, e, "chunks of {}", chunk);
    }
}

/// Activity scopes are bounded: a chain deeper than MAX_SCOPE_DEPTH is not held.
#[test]
fn logs_activity_scopes_are_bounded_in_depth() {
    use common_logs::activity;
    let mut t = LogTrace::new();
    let depth = MAX_SCOPE_DEPTH + 3;
    for i in 0..depth {
        let mut a = activity(1);
        a[1] = (i + 1) as u8;
        let mut parent = activity(1);
        parent[1] = i as u8;
        t.activity = (a, if i == 0 { [0; 16] } else { parent });
        t.scope_start(1, i as i32, "C", r#"{"Level":1}"#);
    }
    let mut last = activity(1);
    last[1] = (MAX_SCOPE_DEPTH) as u8;
    t.activity = (last, [0; 16]);
    t.log(
        1,
        2,
        "C",
        1,
        "",
        "deep",
        r#"{"{OriginalFormat}":"deep"}"#,
        "{}",
    );
    let (e, d) = decode(&t.bytes());
    assert_eq!(e[0].scopes.len(), MAX_SCOPE_DEPTH);
    // The scope past the limit is dropped; the ones after it branch from a scope not held,
    // so each starts a chain of its own (as a start whose parent the session never saw).
    assert_eq!(d.stats().scopes_dropped, 1);
}

/// The bytes held in scopes are bounded: scopes that never end, each with a 1,000,000
/// character argument (as the probe that took serve's `/logs` to 208 MiB with 400 of 500,000,
/// here 24 to keep the test short), on threads and on activity chains: the decoder holds at
/// most MAX_SCOPE_BYTES of them, drops (and counts) the rest, and entries carry the scopes
/// held. Stopped scopes give their bytes back.
#[test]
fn logs_scope_bytes_are_bounded_in_all() {
    use common_logs::activity;
    let per_scope = 1_000_000;
    let count = MAX_SCOPE_BYTES / per_scope + 8;
    let big = format!(r#"{{"S":"{}"}}"#, "x".repeat(per_scope));
    let fit = MAX_SCOPE_BYTES / per_scope;
    for activities in [false, true] {
        let mut t = LogTrace::new();
        t.per_block = 8;
        for i in 0..count as u32 {
            if activities {
                // Each its own chain (a request each), so depth is not what stops them.
                let mut a = activity(1);
                a[1..5].copy_from_slice(&i.to_le_bytes());
                t.activity = (a, [0; 16]);
            }
            // One thread each, so MAX_SCOPE_DEPTH is not what stops them either.
            t.scope_start(u64::from(i) + 1, i as i32, "C", &big);
        }
        t.log(1, 2, "C", 1, "", "m", r#"{"{OriginalFormat}":"m"}"#, "{}");
        let bytes = t.bytes();
        let mut d = LogDecoder::new();
        let mut entries = Vec::new();
        let mut most = 0;
        for c in bytes.chunks(64 * 1024) {
            d.feed(c, &mut |e| entries.push(e)).unwrap();
            most = most.max(d.scope_bytes());
        }
        d.finish(&mut |e| entries.push(e)).unwrap();
        assert!(most <= MAX_SCOPE_BYTES, "{} bytes held", most);
        let held = count - d.stats().scopes_dropped as usize;
        assert!(
            held > 0 && held <= fit,
            "{} scopes held (activities: {}): {:?}",
            held,
            activities,
            d.stats()
        );
        assert!(d.scope_bytes() >= held * per_scope);
        assert_eq!(entries.len(), 1);
        assert_eq!(d.stats().malformed, 0);
    }

    // Stopped scopes free their bytes: scope after scope, each stopped, are all held.
    let mut t = LogTrace::new();
    t.per_block = 8;
    for i in 0..count as i32 {
        t.scope_start(1, i, "C", &big);
        t.log(1, 2, "C", i, "", "m", r#"{"{OriginalFormat}":"m"}"#, "{}");
        t.scope_stop(1, i, "C");
    }
    let (e, d) = decode(&t.bytes());
    assert_eq!(d.stats().scopes_dropped, 0, "{:?}", d.stats());
    assert!(e.iter().all(|e| e.scopes.len() == 1));
    assert_eq!(d.scope_bytes(), 0);
}
