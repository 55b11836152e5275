//! `dsipc convert` and `dsipc report` end to end: the public sample traces (from
//! `../shared/data/nettrace`, unzipped into target/ at test time), captures from the real
//! runtimes busy in Regex backtracking, the committed golden captures, and bad files.
//! Outputs are checked by the real consumers: `go tool pprof` (golang-go) for pprof,
//! speedscope's published schema for speedscope.
#![cfg(target_os = "linux")]

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::{dsipc_limit, flame, regex_host, repo_root, run, s, sample, temp_dir, Run};

/// `dsipc ARGS`: conversions of the 30 MB sample in a debug build need more than the
/// default limit.
fn dsipc(args: &[&str]) -> Run {
    dsipc_limit(args, Duration::from_secs(120))
}

/// Every format from `trace` into `dir`; returns (jsonl, folded, speedscope, pprof) paths.
fn convert_all(trace: &Path, dir: &Path) -> [PathBuf; 4] {
    let formats = ["jsonl", "folded", "speedscope", "pprof"];
    let mut outs = Vec::new();
    for f in formats {
        let out = dir.join(format!("out.{}", f));
        let r = dsipc(&[
            "convert",
            trace.to_str().unwrap(),
            "--format",
            f,
            "-o",
            out.to_str().unwrap(),
            // The same outputs for every capture of a test.
            "--force",
        ]);
        assert_eq!(r.code, Some(0), "convert --format {}: {}", f, r.stderr);
        assert!(out.is_file(), "{} not written", out.display());
        outs.push(out);
    }
    [
        outs[0].clone(),
        outs[1].clone(),
        outs[2].clone(),
        outs[3].clone(),
    ]
}

/// Folded lines are `frame;frame;... COUNT`; returns the total count.
fn check_folded(path: &Path) -> u64 {
    let text = fs::read_to_string(path).unwrap();
    let mut total = 0;
    for line in text.lines() {
        let (stack, count) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("folded line without a count: {:?}", line));
        let n: u64 = count
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {:?}", line));
        assert!(n > 0, "{:?}", line);
        assert!(
            !stack.is_empty() && stack.split(';').all(|f| !f.is_empty()),
            "{:?}",
            line
        );
        total += n;
    }
    total
}

fn check_speedscope(path: &Path) {
    let schema = repo_root().join("tests/data/speedscope/file-format-schema.json");
    let script = repo_root().join("tests/tools/check_speedscope.py");
    let r = run(
        "python3",
        &[
            script.to_str().unwrap(),
            schema.to_str().unwrap(),
            path.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.starts_with("ok "), "{}", r.stdout);
}

/// `go tool pprof -top` output (fails if go is missing: scripts/test.sh installs golang-go).
fn pprof_top(path: &Path) -> String {
    let r = run(
        "go",
        &[
            "tool",
            "pprof",
            "-top",
            "-nodecount=40",
            path.to_str().unwrap(),
        ],
        Duration::from_secs(120),
    );
    assert_eq!(r.code, Some(0), "go tool pprof: {}", r.stderr);
    r.stdout
}

/// The first row of the exclusive table of `dsipc report`.
fn report_top(trace: &Path, extra: &[&str]) -> (String, String) {
    let mut args = vec!["report", trace.to_str().unwrap()];
    args.extend_from_slice(extra);
    let r = dsipc(&args);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let mut lines = r.stdout.lines().skip_while(|l| !l.contains("by exclusive"));
    lines.next();
    lines.next(); // column titles
    let first = lines
        .next()
        .unwrap_or_else(|| panic!("no rows:\n{}", r.stdout));
    (first.to_string(), r.stdout)
}

const SAMPLES_WITH_CPU: &[&str] = &[
    "eventpipe-dotnetcore3.0-win-x64-objver4.nettrace",
    "mixed_managed_external_samples.nettrace",
    "only_managed_samples.nettrace",
    "HeartRateMonitor.10068.nettrace",
];

#[test]
fn sample_traces_convert_to_every_format_with_resolved_frames() {
    for name in SAMPLES_WITH_CPU {
        let trace = match sample(name) {
            Some(s) => s,
            None => return,
        };
        let dir = temp_dir("samples");
        let [jsonl, folded, speedscope, pprof] = convert_all(&trace, &dir);
        // jsonl: one object per event with the documented fields.
        let text = fs::read_to_string(&jsonl).unwrap();
        let mut events = 0;
        for line in text.lines() {
            for key in [
                "\"provider\":",
                "\"id\":",
                "\"version\":",
                "\"name\":",
                "\"timestamp\":",
                "\"thread\":",
                "\"stack_id\":",
                "\"payload\":",
            ] {
                assert!(line.contains(key), "{}: {} lacks {}", name, line, key);
            }
            assert!(line.starts_with('{') && line.ends_with('}'), "{}", line);
            events += 1;
        }
        assert!(events > 0, "{}", name);
        // folded: resolved frames, and as many samples as the report counts.
        let folded_total = check_folded(&folded);
        let ftext = fs::read_to_string(&folded).unwrap();
        let resolved = ftext
            .lines()
            .filter(|l| {
                l.split(';')
                    .any(|f| f.contains('!') && !f.starts_with("?!"))
            })
            .count();
        assert!(resolved > 0, "{}: no resolved frame in folded output", name);
        let (_, report) = report_top(&trace, &[]);
        let report_total: u64 = report
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert!(folded_total > 0 && folded_total <= report_total, "{}", name);
        check_speedscope(&speedscope);
        let top = pprof_top(&pprof);
        assert!(
            top.contains('!'),
            "{}: pprof -top shows no method:\n{}",
            name,
            top
        );
        let _ = fs::remove_dir_all(&dir);
    }
}

#[test]
fn sample_traces_without_samples_convert_to_jsonl() {
    for name in [
        "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace",
        "eventpipe-dotnetcore6.0-win-x64-executioncheckpoints.nettrace",
    ] {
        let trace = match sample(name) {
            Some(s) => s,
            None => return,
        };
        let dir = temp_dir("nosamples");
        let out = dir.join("out.jsonl");
        let r = dsipc(&[
            "convert",
            trace.to_str().unwrap(),
            "--format",
            "jsonl",
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let text = fs::read_to_string(&out).unwrap();
        assert!(text.lines().count() > 0, "{}", name);
        let _ = fs::remove_dir_all(&dir);
    }
}

#[test]
fn mixed_samples_managed_only_drops_external_samples() {
    let trace = match sample("mixed_managed_external_samples.nettrace") {
        Some(s) => s,
        None => return,
    };
    let (_, all) = report_top(&trace, &[]);
    let (_, managed) = report_top(&trace, &["--managed-only"]);
    let total = |s: &str| -> u64 { s.split_whitespace().next().unwrap().parse().unwrap() };
    assert!(
        total(&managed) < total(&all) && total(&managed) > 0,
        "{}\n{}",
        all,
        managed
    );
    let dir = temp_dir("managed");
    let a = dir.join("all.folded");
    let m = dir.join("managed.folded");
    let t = trace.to_str().unwrap();
    assert_eq!(
        dsipc(&[
            "convert",
            t,
            "--format",
            "folded",
            "-o",
            a.to_str().unwrap()
        ])
        .code,
        Some(0)
    );
    assert_eq!(
        dsipc(&[
            "convert",
            t,
            "--format",
            "folded",
            "--managed-only",
            "-o",
            m.to_str().unwrap()
        ])
        .code,
        Some(0)
    );
    assert!(check_folded(&m) < check_folded(&a));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn truncated_file_converts_what_it_holds_and_fails() {
    let trace = match sample("only_managed_samples.nettrace") {
        Some(s) => s,
        None => return,
    };
    let bytes = fs::read(&trace).unwrap();
    let dir = temp_dir("truncated");
    let cut = dir.join("cut.nettrace");
    fs::write(&cut, &bytes[..bytes.len() * 2 / 3]).unwrap();
    let out = dir.join("cut.folded");
    let r = dsipc(&[
        "convert",
        cut.to_str().unwrap(),
        "--format",
        "jsonl",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    let err_lines: Vec<&str> = r.stderr.lines().filter(|l| l.contains("offset")).collect();
    assert_eq!(err_lines.len(), 1, "{}", r.stderr);
    assert!(err_lines[0].contains("truncated"), "{}", r.stderr);
    let text = fs::read_to_string(&out).unwrap();
    assert!(
        text.lines().count() > 100,
        "kept {} lines",
        text.lines().count()
    );
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn bad_file_fails_naming_the_offset_and_leaves_an_existing_output_alone() {
    let dir = temp_dir("bad");
    let bad = dir.join("bad.nettrace");
    let mut bytes = b"Nettrace".to_vec();
    bytes.extend_from_slice(&[0xff; 64]);
    fs::write(&bad, &bytes).unwrap();
    let out = dir.join("precious.txt");
    fs::write(&out, b"keep me").unwrap();
    // Even with --force, a failed conversion leaves it alone.
    let r = dsipc(&[
        "convert",
        bad.to_str().unwrap(),
        "--format",
        "folded",
        "-o",
        out.to_str().unwrap(),
        "--force",
    ]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("offset"), "{}", r.stderr);
    assert_eq!(fs::read(&out).unwrap(), b"keep me");
    // No temporary file left beside it.
    let left: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), 2, "{:?}", left);
    // The input is never the output.
    let r = dsipc(&[
        "convert",
        bad.to_str().unwrap(),
        "-o",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(2));
    assert_eq!(fs::read(&bad).unwrap(), bytes);
    let _ = fs::remove_dir_all(&dir);
}

/// The committed captures of the Regex-busy hosts (tests/data/nettrace), with the report
/// they gave when committed: (file, samples, top method by exclusive samples).
const GOLDEN: &[(&str, u64, &str)] = &[
    (
        "regex-net8.0.4.nettrace.gz",
        476,
        "System.Text.RegularExpressions!System.Text.RegularExpressions.RegexInterpreter.TryMatchAtCurrentPosition(value class System.ReadOnlySpan`1<wchar>)",
    ),
    (
        "regex-netcore3.1.23.nettrace.gz",
        350,
        "System.Text.RegularExpressions!System.Text.RegularExpressions.RegexInterpreter.Go()",
    ),
];

#[test]
fn golden_captures_report_regex_on_top() {
    let data = repo_root().join("tests/data/nettrace");
    let dir = temp_dir("golden");
    for (name, samples, top_method) in GOLDEN {
        let gz = data.join(name);
        assert!(fs::metadata(&gz).unwrap().len() < 200 * 1024, "{}", name);
        let path = dir.join(name.trim_end_matches(".gz"));
        let out = Command::new("gzip")
            .arg("-dc")
            .arg(&gz)
            .output()
            .expect("gzip");
        assert!(out.status.success());
        fs::write(&path, &out.stdout).unwrap();
        let (top, report) = report_top(&path, &[]);
        assert!(
            report.starts_with(&format!("{} samples", samples)),
            "{}: {}",
            name,
            report
        );
        assert!(
            top.ends_with(top_method),
            "{}: top row {:?}\n{}",
            name,
            top,
            report
        );
        let [jsonl, folded, speedscope, pprof] = convert_all(&path, &dir);
        assert!(fs::read_to_string(&jsonl)
            .unwrap()
            .contains("\"provider\":\"Microsoft-DotNETCore-SampleProfiler\""));
        assert_eq!(check_folded(&folded), *samples);
        assert!(fs::read_to_string(&folded).unwrap().contains(top_method));
        check_speedscope(&speedscope);
        assert!(fs::read_to_string(&speedscope)
            .unwrap()
            .contains("RegexInterpreter"));
        assert!(pprof_top(&pprof).contains("RegexInterpreter"));
    }
    let _ = fs::remove_dir_all(&dir);
}

/// `convert --format flamegraph` of the committed Regex-busy captures: an SVG beside the
/// trace (same stem, `.svg`), titled with the file and the trace's pid, every sample under
/// `all`, and the Regex interpreter's frame the widest of its row; `--managed-only` draws
/// fewer samples of a trace with external ones.
#[test]
fn convert_flamegraph_shows_the_regex_interpreter_widest() {
    let data = repo_root().join("tests/data/nettrace");
    let dir = temp_dir("flamegraph");
    for (name, samples, _) in GOLDEN {
        let path = dir.join(name.trim_end_matches(".gz"));
        let out = Command::new("gzip")
            .arg("-dc")
            .arg(data.join(name))
            .output()
            .expect("gzip");
        assert!(out.status.success());
        fs::write(&path, &out.stdout).unwrap();
        let r = dsipc(&["convert", path.to_str().unwrap(), "--format", "flamegraph"]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let svg_path = path.with_extension("svg");
        assert!(
            r.stderr.contains(&format!(
                "wrote {}: {} samples",
                svg_path.display(),
                samples
            )),
            "{}",
            r.stderr
        );
        let svg = fs::read_to_string(&svg_path).unwrap();
        let title = flame::title(&svg);
        let file = path.file_name().unwrap().to_str().unwrap();
        assert!(
            title.starts_with(&format!("dsipc: {} (pid ", file)) && title.ends_with(" s)"),
            "{}",
            title
        );
        let frames = flame::frames(&svg);
        let all = frames.iter().find(|f| f.name == "all").expect("all");
        assert_eq!(all.samples, *samples);
        let (regex, widest) = flame::widest_in_the_row_of(&frames, "RegexInterpreter");
        assert_eq!(regex, widest, "{}", name);
        assert!(regex.name.starts_with(
            "System.Text.RegularExpressions!System.Text.RegularExpressions.RegexInterpreter."
        ));
    }
    if let Some(trace) = sample("mixed_managed_external_samples.nettrace") {
        let t = trace.to_str().unwrap();
        let drawn = |extra: &[&str]| {
            let out = dir.join("mixed.svg");
            let mut args = vec!["convert", t, "--format", "flamegraph", "--force", "-o"];
            args.push(out.to_str().unwrap());
            args.extend_from_slice(extra);
            let r = dsipc(&args);
            assert_eq!(r.code, Some(0), "{}", r.stderr);
            let frames = flame::frames(&fs::read_to_string(&out).unwrap());
            frames.iter().find(|f| f.name == "all").unwrap().samples
        };
        let (all, managed) = (drawn(&[]), drawn(&["--managed-only"]));
        assert!(managed < all && managed > 0, "{} {}", managed, all);
    }
    let _ = fs::remove_dir_all(&dir);
}

fn trace_regex_host(runtime: &str) {
    let (mut host, pid) = regex_host(runtime, 120);
    let dir = temp_dir(runtime);
    let trace = dir.join("regex.nettrace");
    let r = dsipc(&[
        "trace",
        &pid.to_string(),
        "--duration",
        "3",
        "--format",
        "speedscope",
        "-o",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    host.kill();
    // --format: the profile built while the stream arrived, beside the trace.
    let live = dir.join("regex.speedscope.json");
    assert!(
        r.stderr.contains(&format!("wrote {}: ", live.display())),
        "{}",
        r.stderr
    );
    check_speedscope(&live);
    assert!(fs::read_to_string(&live)
        .unwrap()
        .contains("RegexInterpreter"));
    let (top, report) = report_top(&trace, &[]);
    assert!(
        top.contains("Regex"),
        "{}: top row {:?}\n{}",
        runtime,
        top,
        report
    );
    let [jsonl, folded, speedscope, pprof] = convert_all(&trace, &dir);
    assert!(fs::read_to_string(&jsonl)
        .unwrap()
        .contains("SampleProfiler"));
    check_folded(&folded);
    assert!(fs::read_to_string(&folded)
        .unwrap()
        .contains("RegexInterpreter"));
    check_speedscope(&speedscope);
    assert!(fs::read_to_string(&speedscope)
        .unwrap()
        .contains("RegexInterpreter"));
    let top = pprof_top(&pprof);
    assert!(top.contains("RegexInterpreter"), "{}", top);
    if let Some(keep) = std::env::var_os("DSIPC_KEEP_CAPTURE") {
        let dest = PathBuf::from(keep).join(format!("regex-{}.nettrace", runtime));
        fs::copy(&trace, &dest).unwrap();
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn net8_regex_host_report_and_every_format() {
    trace_regex_host("net8");
}

#[test]
fn netcore31_regex_host_report_and_every_format() {
    trace_regex_host("netcore31");
}

/// `convert --format jsonl` gives each event TraceEvent's ActivityID and RelatedActivityID:
/// the committed captures of `host.py --activities` (.NET 8.0.4, nettrace V5; Core 3.1.23,
/// V4) with TplEventSource's TasksFlowActivityIds on hold nested Request > Step activities.
#[test]
fn convert_jsonl_carries_the_activity_ids_of_real_captures() {
    for runtime in ["net8.0.4", "netcore3.1.23"] {
        let trace = repo_root().join(format!(
            "tests/data/nettrace/activities-{}.nettrace",
            runtime
        ));
        let r = dsipc(&[
            "convert",
            trace.to_str().unwrap(),
            "--format",
            "jsonl",
            "-o",
            "-",
        ]);
        assert_eq!(r.code, Some(0), "{}: {}", runtime, r.stderr);
        let events: Vec<serde_json::Value> = r
            .stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .filter(|e: &serde_json::Value| e["provider"] == "Dsipc-Activities")
            .collect();
        let first = events.iter().position(|e| e["name"] == "Request").unwrap();
        let mut cycles = 0;
        let mut requests = std::collections::HashSet::new();
        for c in events[first..].chunks_exact(5) {
            let names: Vec<&str> = c.iter().map(|e| e["name"].as_str().unwrap()).collect();
            assert_eq!(
                names,
                ["Request", "Step", "Work", "Step", "Request"],
                "{}",
                runtime
            );
            let id = |i: usize| {
                c[i]["activity_id"]
                    .as_str()
                    .unwrap_or_else(|| panic!("{}: {}", runtime, c[i]))
            };
            let (request, step) = (id(0), id(1));
            assert_ne!(request, step);
            // The nested start names the request as its related activity; the events
            // inside the step and each stop carry their own activity's id.
            assert_eq!(c[1]["related_activity_id"], request, "{}", runtime);
            assert_eq!((id(2), id(3), id(4)), (step, step, request), "{}", runtime);
            assert!(
                requests.insert(request.to_string()),
                "{}: a request per cycle",
                runtime
            );
            cycles += 1;
        }
        assert!(cycles >= 5, "{}: {} cycles", runtime, cycles);
    }
}

/// `dsipc trace` of a runtime that collects garbage and throws every 50 ms
/// (`host.py --busy`) for two seconds with `args`: its stderr and the events as JSON lines.
fn busy_trace(runtime: &str, args: &[&str]) -> (String, String) {
    common::configure_python();
    let mut opts = dsipc_testkit::HostOptions::net8(120);
    opts.runtime = runtime.to_string();
    opts.args.push("--busy".into());
    let mut host = dsipc_testkit::HostedRuntime::spawn(&opts).expect("spawn host");
    let pid = host
        .wait_ready(Duration::from_secs(90))
        .expect("host READY")
        .pid
        .to_string();
    let dir = temp_dir(&format!("busy-{}", runtime));
    let trace = dir.join("busy.nettrace");
    let mut all = vec!["trace", &pid, "--duration", "2", "-o", s(&trace)];
    all.extend_from_slice(args);
    let r = dsipc(&all);
    host.kill();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let jsonl = dir.join("busy.jsonl");
    let c = dsipc(&["convert", s(&trace), "--format", "jsonl", "-o", s(&jsonl)]);
    assert_eq!(c.code, Some(0), "{}", c.stderr);
    let events = fs::read_to_string(&jsonl).unwrap();
    let _ = fs::remove_dir_all(&dir);
    (r.stderr, events)
}

const GC_START: &str = "\"name\":\"GC/Start\"";
const EXCEPTION_START: &str = "\"name\":\"Exception/Start\"";

/// A provider named bare (`--providers Microsoft-Windows-DotNETRuntime`) is every keyword
/// at Verbose, as in dotnet-trace: the busy runtime's GC and exception events arrive.
#[test]
fn bare_provider_name_collects_every_keyword_at_verbose() {
    for runtime in ["net8", "netcore31"] {
        let (stderr, events) =
            busy_trace(runtime, &["--providers", "Microsoft-Windows-DotNETRuntime"]);
        assert!(
            stderr.contains("Microsoft-Windows-DotNETRuntime          0xFFFFFFFFFFFFFFFF  level 5"),
            "{}",
            stderr
        );
        for name in [GC_START, EXCEPTION_START] {
            assert!(
                events.contains(name),
                "{}: no {} in {} events",
                runtime,
                name,
                events.lines().count()
            );
        }
    }
}

/// dotnet-trace's `--clrevents` (keyword names, any case) with `--clreventlevel`, and
/// `--profile` with `--clrevents` ignored beside it, as dotnet-trace does.
#[test]
fn clrevents_and_profiles_as_dotnet_trace_takes_them() {
    let (stderr, events) = busy_trace(
        "net8",
        &["--clrevents", "GC+exception", "--clreventlevel", "verbose"],
    );
    assert!(
        stderr.contains("Microsoft-Windows-DotNETRuntime          0x0000000000008001  level 5"),
        "{}",
        stderr
    );
    assert!(
        events.contains(GC_START) && events.contains(EXCEPTION_START),
        "{}",
        stderr
    );
    let (stderr, events) = busy_trace(
        "net8",
        &["--profile", "gc-collect", "--clrevents", "exception"],
    );
    assert!(
        stderr.contains("--clrevents exception is ignored"),
        "{}",
        stderr
    );
    assert!(
        stderr.contains("Microsoft-Windows-DotNETRuntimePrivate"),
        "{}",
        stderr
    );
    assert!(events.contains(GC_START), "{}", stderr);
    assert!(!events.contains(EXCEPTION_START), "{}", stderr);
}

/// When most samples are of threads outside managed code, `report` says so and points at
/// `--managed-only`, which shows the CPU (and then says nothing of it).
#[test]
fn report_says_when_samples_outside_managed_code_dominate() {
    let busy = repo_root().join("tests/data/nettrace/net8.0.4-busy.nettrace");
    let r = dsipc(&["report", s(&busy)]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout
            .contains("71% of the samples are of threads outside managed code")
            && r.stdout
                .contains("--managed-only shows where managed code spends the CPU (27 samples)"),
        "{}",
        r.stdout
    );
    let r = dsipc(&["report", s(&busy), "--managed-only"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout.starts_with("27 samples (managed only)"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("outside managed code"), "{}", r.stdout);
}
