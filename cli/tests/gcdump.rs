//! `dsipc gcdump` end to end: against real runtimes (.NET 8.0.4 and .NET Core 3.1.23 hosted
//! by `host.py`, with and without `--hold 10000`; needs `scripts/setup-runtimes.sh`), and
//! against the fake runtime serving the committed heap captures, cut short, corrupt, or
//! going silent. Every run is bounded; tests wait for the hosts' READY lines, never on
//! sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{dsipc, dsipc_in, fake, me, s, Live, Run};
use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config, HostOptions, HostedRuntime, StreamSpec, TempDir};

fn host(runtime: &str, hold: Option<u32>) -> HostedRuntime {
    common::configure_python();
    let mut opts = HostOptions::net8(120);
    opts.runtime = runtime.to_string();
    if let Some(n) = hold {
        opts.args.push("--hold".into());
        opts.args.push(n.to_string());
    }
    HostedRuntime::spawn(&opts).expect("spawn host")
}

/// The text report's rows: (bytes, count, type), after checking the header.
fn rows(text: &str) -> Vec<(u64, u64, String)> {
    let mut lines = text.lines();
    let num = |s: &str| s.trim().replace(',', "").parse::<u64>().expect("a number");
    let bytes = lines.next().expect("bytes line");
    assert!(bytes.ends_with("  GC Heap bytes"), "{}", text);
    let objects = lines.next().expect("objects line");
    assert!(objects.ends_with("  GC Heap objects"), "{}", text);
    assert_eq!(lines.next(), Some(""));
    assert_eq!(
        lines.next(),
        Some("   Object Bytes      Count  Type"),
        "{}",
        text
    );
    let out: Vec<(u64, u64, String)> = lines
        .map(|l| {
            (
                num(&l[..15]),
                num(&l[17..26]),
                l.get(28..).expect("a type").to_string(),
            )
        })
        .collect();
    assert!(
        out.windows(2).all(|w| w[0].0 >= w[1].0),
        "not biggest first"
    );
    out
}

fn count_of(rows: &[(u64, u64, String)], name: &str) -> (u64, u64) {
    rows.iter()
        .find(|r| r.2 == name)
        .map(|r| (r.1, r.0))
        .unwrap_or_else(|| panic!("no {} in the report", name))
}

fn ok(r: &Run) {
    r.assert_no_panic();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

/// A held host and a plain one of the same runtime: the held one has exactly 10,000
/// System.Version objects more (the runtime has a couple of its own), 32 bytes each, and
/// the List's one 10,000-slot array; JSON says the same as text.
fn check_runtime(runtime: &str) {
    let mut held = host(runtime, Some(10_000));
    let mut plain = host(runtime, None);
    let held_pid = held
        .wait_ready(Duration::from_secs(90))
        .expect("READY")
        .pid
        .to_string();
    let plain_pid = plain
        .wait_ready(Duration::from_secs(90))
        .expect("READY")
        .pid
        .to_string();

    let r = dsipc(&["gcdump", "report", "--pid", &held_pid]);
    ok(&r);
    assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    assert_pause(&r.stderr);
    let held_rows = rows(&r.stdout);
    let (count, bytes) = count_of(&held_rows, "System.Version");
    assert_eq!(bytes, count * 32);
    assert_eq!(count_of(&held_rows, "System.Version[]"), (1, 24 + 80_000));
    assert_eq!(
        count_of(
            &held_rows,
            "System.Collections.Generic.List`1[System.Version]"
        ),
        (1, 32)
    );

    let r = dsipc(&["gcdump", "report", "--pid", &plain_pid, "--timeout", "20"]);
    ok(&r);
    let (baseline, _) = count_of(&rows(&r.stdout), "System.Version");
    assert_eq!(
        count - baseline,
        10_000,
        "{} held vs {} plain",
        count,
        baseline
    );
    eprintln!(
        "{}: System.Version {} held, {} plain",
        runtime, count, baseline
    );

    // --top and JSON: the same biggest types, one line.
    let r = dsipc(&[
        "gcdump", "report", "-p", &held_pid, "--format", "json", "--top", "5",
    ]);
    ok(&r);
    let j = r.stdout.trim_end();
    assert_eq!(r.stdout.lines().count(), 1);
    assert!(j.starts_with("[{\"type\":") && j.ends_with("}]"), "{}", j);
    assert_eq!(j.matches("{\"type\":").count(), 5, "{}", j);
    // Every run on the same runtime names every type (the type table is flushed first).
    assert!(!j.contains("UNKNOWN_TYPE"), "{}", j);
    let text = dsipc(&["gcdump", "report", "--pid", &held_pid, "--top", "5"]);
    ok(&text);
    assert_eq!(rows(&text.stdout).len(), 5);
    assert!(!text.stdout.contains("UNKNOWN_TYPE"), "{}", text.stdout);

    // collect: a .gcdump whose report has the held objects too.
    let dir = TempDir::new("dsipc-gcdump-collect").unwrap();
    let file = dir.path().join("held.gcdump");
    let c = dsipc(&["gcdump", "collect", &held_pid, "-o", s(&file)]);
    ok(&c);
    assert!(c.stderr.contains("dsipc: wrote"), "{}", c.stderr);
    assert_pause(&c.stderr);
    let r = dsipc(&["gcdump", "report", s(&file)]);
    ok(&r);
    // A file's report has no live runtime to have paused.
    assert!(!r.stderr.contains("paused"), "{}", r.stderr);
    let from_file = rows(&r.stdout);
    let (count, bytes) = count_of(&from_file, "System.Version");
    assert_eq!((count - baseline, bytes), (10_000, count * 32));
    assert_eq!(count_of(&from_file, "System.Version[]"), (1, 24 + 80_000));

    // --retained: the List keeps at least its array alive; a Version only itself.
    let r = dsipc(&[
        "gcdump",
        "report",
        s(&file),
        "--retained",
        "--format",
        "json",
    ]);
    ok(&r);
    let list = field_of(
        &r.stdout,
        "System.Collections.Generic.List`1[System.Version]",
    );
    assert!(list.3 >= 32 + 80_024, "{:?}", list);
    let v = field_of(&r.stdout, "System.Version");
    assert_eq!(v.3, v.2, "{:?}", v);
}

/// The closing note's pause (`dsipc: the runtime paused P ms for the heap walk (GC G ms)`):
/// positive, below the whole command's time, the GC within it. Returns (P, G) in ms.
fn assert_pause(stderr: &str) -> (f64, f64) {
    let line = stderr
        .lines()
        .find(|l| l.starts_with("dsipc: the runtime paused "))
        .unwrap_or_else(|| panic!("no pause note in {}", stderr));
    let nums: Vec<f64> = line
        .split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter(|w| !w.is_empty() && w.chars().any(|c| c.is_ascii_digit()))
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(nums.len(), 2, "{}", line);
    assert!(line.ends_with(" ms)"), "{}", line);
    let (pause, gc) = (nums[0], nums[1]);
    assert!(pause > 0.0 && pause < 30_000.0, "{}", line);
    assert!(gc <= pause, "{}", line);
    (pause, gc)
}

/// The JSON report's entry for `name`: (type, count, bytes, retained).
fn field_of(json: &str, name: &str) -> (String, u64, u64, u64) {
    let key = format!("{{\"type\":\"{}\",", name);
    let at = json
        .find(&key)
        .unwrap_or_else(|| panic!("no {} in {}", name, json));
    let rest = &json[at + key.len()..];
    let entry = &rest[..rest.find('}').unwrap()];
    let num = |k: &str| -> u64 {
        let f = format!("\"{}\":", k);
        let i = entry
            .find(&f)
            .unwrap_or_else(|| panic!("no {} in {}", k, entry))
            + f.len();
        entry[i..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    (
        name.to_string(),
        num("count"),
        num("bytes"),
        num("retained"),
    )
}

#[test]
fn net8_held_versions() {
    check_runtime("net8");
}

#[test]
fn netcore31_held_versions() {
    check_runtime("netcore31");
}

/// A committed capture, whole (gunzipped), leaked for the fake.
fn capture(name: &str) -> &'static [u8] {
    let path = common::repo_root().join("tests/data/nettrace").join(name);
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(&path)
        .output()
        .expect("gzip runs");
    assert!(out.status.success(), "gzip -dc {}", path.display());
    Box::leak(out.stdout.into_boxed_slice())
}

#[test]
fn a_recorded_heap_walk_served_by_the_fake() {
    for (name, version, pause) in [
        ("heap-net8.0.4.nettrace.gz", 10_002u64, (29.1, 28.9)),
        ("heap-netcore3.1.23.nettrace.gz", 10_002, (25.4, 24.6)),
    ] {
        let dir = TempDir::new("dsipc-gcdump-fake").unwrap();
        let _rt = fake(
            &dir,
            Config::new()
                .stream(StreamSpec::content(capture(name)))
                .answer(Cmd::StopTracing, Answer::IgnoreStop),
        );
        let r = dsipc_in(dir.path(), &["gcdump", "report", "--pid", &me()]);
        ok(&r);
        assert_eq!(
            count_of(&rows(&r.stdout), "System.Version"),
            (version, version * 32),
            "{}",
            name
        );
        // The runtime's pause, from the recorded GC events (on stderr, not in the report).
        assert_eq!(assert_pause(&r.stderr), pause, "{}", name);
        assert!(!r.stdout.contains("paused"), "{}", r.stdout);
        let r = dsipc_in(
            dir.path(),
            &["gcdump", "report", "--pid", &me(), "--format", "json"],
        );
        ok(&r);
        assert!(
            r.stdout.contains(&format!(
                "{{\"type\":\"System.Version\",\"count\":{},\"bytes\":{}}}",
                version,
                version * 32
            )),
            "{}",
            r.stdout
        );
    }
}

#[test]
fn collect_writes_a_gcdump_whose_report_is_the_live_one() {
    let dir = TempDir::new("dsipc-gcdump-file").unwrap();
    let _rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::content(capture("heap-net8.0.4.nettrace.gz")))
            .answer(Cmd::StopTracing, Answer::IgnoreStop),
    );
    let live = dsipc_in(dir.path(), &["gcdump", "report", "--pid", &me()]);
    ok(&live);
    let file = dir.path().join("out.gcdump");
    let c = dsipc_in(dir.path(), &["gcdump", "collect", &me(), "-o", s(&file)]);
    ok(&c);
    assert_eq!(assert_pause(&c.stderr), (29.1, 28.9));
    let bytes = std::fs::read(&file).unwrap();
    assert_eq!(&bytes[4..24], b"!FastSerialization.1");
    for format in ["text", "json"] {
        let a = dsipc_in(
            dir.path(),
            &["gcdump", "report", "--pid", &me(), "--format", format],
        );
        let b = dsipc(&["gcdump", "report", s(&file), "--format", format]);
        ok(&a);
        ok(&b);
        assert_eq!(a.stdout, b.stdout, "{}", format);
    }
    // --retained: the same from the file as live; the held List retains its array.
    let a = dsipc_in(
        dir.path(),
        &["gcdump", "report", "--pid", &me(), "--retained"],
    );
    let b = dsipc(&["gcdump", "report", s(&file), "--retained"]);
    ok(&a);
    ok(&b);
    assert_eq!(a.stdout, b.stdout);
    assert!(a.stdout.contains("Retained Bytes"), "{}", a.stdout);
    let j = dsipc(&[
        "gcdump",
        "report",
        s(&file),
        "--retained",
        "--format",
        "json",
    ]);
    ok(&j);
    assert_eq!(
        field_of(
            &j.stdout,
            "System.Collections.Generic.List`1[System.Version]"
        ),
        (
            "System.Collections.Generic.List`1[System.Version]".to_string(),
            1,
            32,
            32 + 80_024
        )
    );
    assert_eq!(
        dsipc(&["gcdump", "report", s(&file), "--top", "3"]).stdout,
        live.stdout
            .lines()
            .take(7)
            .map(|l| format!("{}\n", l))
            .collect::<String>()
    );

    // An existing FILE is not replaced without --force, and is left as it was.
    let r = dsipc_in(dir.path(), &["gcdump", "collect", &me(), "-o", s(&file)]);
    r.assert_exit(1, &["exists", "--force"]);
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
    let r = dsipc_in(
        dir.path(),
        &["gcdump", "collect", &me(), "-o", s(&file), "--force"],
    );
    ok(&r);

    // Without -o: YYYYMMDD_HHMMSS_PID.gcdump in the current directory.
    let work = TempDir::new("dsipc-gcdump-cwd").unwrap();
    let mut cmd = std::process::Command::new(common::bin());
    cmd.args(["gcdump", "collect", &me(), "--tmpdir", s(dir.path())])
        .current_dir(work.path());
    let r = Live::spawn(cmd).wait(Duration::from_secs(60));
    ok(&r);
    let names = common::names_in(work.path());
    assert_eq!(names.len(), 1, "{:?}", names);
    let n = &names[0];
    let suffix = format!("_{}.gcdump", me());
    assert!(n.ends_with(&suffix), "{}", n);
    let stamp = &n[..n.len() - suffix.len()];
    assert_eq!(stamp.len(), 15, "{}", n);
    assert!(stamp[..8].chars().all(|c| c.is_ascii_digit()) && &stamp[8..9] == "_");
    assert!(stamp[9..].chars().all(|c| c.is_ascii_digit()), "{}", n);
}

#[test]
fn report_reads_a_recorded_heap_trace_too() {
    // The committed capture, unzipped: a .nettrace of dotnet-gcdump's session.
    let dir = TempDir::new("dsipc-gcdump-nettrace").unwrap();
    let trace = dir.path().join("heap.nettrace");
    let whole = capture("heap-net8.0.4.nettrace.gz");
    std::fs::write(&trace, whole).unwrap();
    let r = dsipc(&["gcdump", "report", s(&trace)]);
    ok(&r);
    assert_eq!(
        count_of(&rows(&r.stdout), "System.Version"),
        (10_002, 320_064)
    );
    // Served by the fake, the same report.
    let _rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::content(whole))
            .answer(Cmd::StopTracing, Answer::IgnoreStop),
    );
    assert_eq!(
        dsipc_in(dir.path(), &["gcdump", "report", "--pid", &me()]).stdout,
        r.stdout
    );
    // Cut before the walk is over: exit 1 naming the offset.
    std::fs::write(&trace, &whole[..whole.len() / 4]).unwrap();
    let r = dsipc(&["gcdump", "report", s(&trace)]);
    r.assert_no_panic();
    r.assert_exit(1, &["did not parse", "offset"]);
    // A trace without a heap walk.
    let busy = common::repo_root().join("tests/data/nettrace/net8.0.4-busy.nettrace");
    dsipc(&["gcdump", "report", s(&busy)]).assert_exit(1, &["holds no heap walk"]);
}

#[test]
fn a_bad_gcdump_file_is_exit_1_naming_the_offset() {
    let dir = TempDir::new("dsipc-gcdump-badfile").unwrap();
    let missing = dir.path().join("none.gcdump");
    dsipc(&["gcdump", "report", s(&missing)]).assert_exit(1, &["cannot read"]);
    // Neither a .gcdump nor a .nettrace.
    let other = common::repo_root().join("README.md");
    let r = dsipc(&["gcdump", "report", s(&other)]);
    r.assert_no_panic();
    r.assert_exit(1, &["not a readable .gcdump at offset 0"]);
    // A cut file: the offset where it ends.
    let _rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::content(capture(
                "heap-netcore3.1.23.nettrace.gz",
            )))
            .answer(Cmd::StopTracing, Answer::IgnoreStop),
    );
    let file = dir.path().join("cut.gcdump");
    ok(&dsipc_in(
        dir.path(),
        &["gcdump", "collect", &me(), "-o", s(&file)],
    ));
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.truncate(bytes.len() / 2);
    std::fs::write(&file, &bytes).unwrap();
    let r = dsipc(&["gcdump", "report", s(&file)]);
    r.assert_no_panic();
    r.assert_exit(
        1,
        &[
            "not a readable .gcdump at offset",
            "does not fit in the file",
        ],
    );
    assert_eq!(r.stdout, "");
}

#[test]
fn a_runtime_dying_mid_walk_is_exit_1() {
    let whole = capture("heap-net8.0.4.nettrace.gz");
    let dir = TempDir::new("dsipc-gcdump-dies").unwrap();
    let _rt = fake(
        &dir,
        Config::new().stream(StreamSpec::content(&whole[..whole.len() / 4])),
    );
    let r = dsipc_in(
        dir.path(),
        &["gcdump", "report", "--pid", &me(), "--timeout", "5"],
    );
    r.assert_no_panic();
    r.assert_exit(1, &["before the heap walk was over", "offset"]);
    assert_eq!(r.stdout, "");
}

#[test]
fn a_corrupt_heap_event_is_exit_1_naming_its_offset() {
    // A GCBulkNode's Count made huge: its payload no longer holds it.
    let whole = capture("heap-netcore3.1.23.nettrace.gz");
    let mut bad = whole.to_vec();
    let offset = corrupt_first_bulk_node(&mut bad);
    let dir = TempDir::new("dsipc-gcdump-corrupt").unwrap();
    let _rt = fake(
        &dir,
        Config::new()
            .stream(StreamSpec::content(Box::leak(bad.into_boxed_slice())))
            .answer(Cmd::StopTracing, Answer::IgnoreStop),
    );
    let r = dsipc_in(
        dir.path(),
        &["gcdump", "report", "--pid", &me(), "--timeout", "5"],
    );
    r.assert_no_panic();
    r.assert_exit(
        1,
        &[
            "did not parse",
            &format!("GCBulkNode event at offset {}", offset),
        ],
    );
    assert_eq!(r.stdout, "");
}

/// Sets the Count of the stream's first GCBulkNode event (the runtime's event id 18) to
/// u32::MAX; returns the event's offset.
fn corrupt_first_bulk_node(data: &mut [u8]) -> u64 {
    use dsipc::nettrace::Item;
    use dsipc_trace::{TraceAnalyzer, TraceStream};
    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::new();
    let mut found: Option<(u64, Vec<u8>)> = None;
    stream
        .feed(data, |item: &Item<'_>| {
            let id = analyzer
                .on_item(item)
                .map(|m| (m.provider.clone(), m.event_id));
            if let (Item::Event(e), Some((p, 18))) = (item, id) {
                if found.is_none() && p == "Microsoft-Windows-DotNETRuntime" {
                    found = Some((e.offset, e.payload[..16].to_vec()));
                }
            }
        })
        .unwrap();
    let (offset, head) = found.expect("a GCBulkNode");
    // The payload (Index u32, Count u32, ...) follows the event's header.
    let at = offset as usize
        + data[offset as usize..]
            .windows(16)
            .position(|w| w == &head[..])
            .expect("the payload after its header");
    data[at + 4..at + 8].copy_from_slice(&u32::MAX.to_le_bytes());
    offset
}

#[test]
fn a_runtime_going_silent_is_exit_1_within_the_timeout() {
    let whole = capture("heap-net8.0.4.nettrace.gz");
    let dir = TempDir::new("dsipc-gcdump-silent").unwrap();
    let _rt = fake(
        &dir,
        Config::new().stream(StreamSpec {
            chunk: 4096,
            pause: Duration::from_secs(4),
            ..StreamSpec::content(&whole[..200_000])
        }),
    );
    let r = dsipc_in(
        dir.path(),
        &["gcdump", "report", "--pid", &me(), "--timeout", "1"],
    );
    r.assert_no_panic();
    r.assert_exit(1, &["1.0 s"]);
    assert!(r.took < Duration::from_secs(3), "took {:?}", r.took);

    let dir = TempDir::new("dsipc-gcdump-hang").unwrap();
    let _rt = fake(
        &dir,
        Config::new().answer(Cmd::CollectTracing2, Answer::Hang),
    );
    let r = dsipc_in(
        dir.path(),
        &["gcdump", "report", "--pid", &me(), "--timeout", "1"],
    );
    r.assert_no_panic();
    r.assert_exit(1, &["timed out"]);
    assert!(r.took < Duration::from_secs(3), "took {:?}", r.took);
}

#[test]
fn usage_errors() {
    dsipc(&["gcdump"]).assert_usage("subcommand");
    dsipc(&["gcdump", "report"]).assert_usage("--pid PID or a .gcdump FILE");
    dsipc(&["gcdump", "report", "--pid", "1", "x.gcdump"]).assert_usage("not both");
    dsipc(&["gcdump", "collect"]).assert_usage("PID");
    dsipc(&["gcdump", "report", "--pid", "1", "--format", "xml"])
        .assert_usage("--format must be text or json");
    dsipc(&["gcdump", "report", "--pid", "1", "--top", "0"]).assert_usage("--top");
    dsipc(&["gcdump", "frobnicate"]).assert_usage("unknown gcdump subcommand");
    let r = dsipc(&["gcdump", "report", "--pid", "2147483646"]);
    r.assert_exit(1, &["no process with pid 2147483646"]);
    let h = dsipc(&["gcdump", "--help"]);
    assert_eq!(h.code, Some(0));
    assert!(
        h.stdout.contains("dsipc gcdump report --pid PID"),
        "{}",
        h.stdout
    );
}
