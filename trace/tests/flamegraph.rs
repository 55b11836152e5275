//! Flame graphs (`ProfileFormat::Flamegraph`) of the committed Regex-busy .NET 8 capture
//! (tests/data/nettrace/regex-net8.0.4.nettrace.gz): the SVG is well-formed XML, titled with
//! the process and the trace's time span, and its widest frame at the Regex interpreter's
//! depth is the interpreter's; `--managed-only` keeps the managed samples only; a profile
//! without samples is an error, not an empty picture.
#![cfg(feature = "flamegraph")]

use std::path::PathBuf;
use std::process::Command;

use dsipc::nettrace::Item;
use dsipc_trace::format::{ProfileFormat, ProfileMeta, Selection};
use dsipc_trace::{Profile, TraceAnalyzer, TraceStream};
use quick_xml::events::Event;
use quick_xml::Reader;

fn profile(name: &str) -> (Profile, ProfileMeta) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/nettrace")
        .join(name);
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(&path)
        .output()
        .expect("gzip runs");
    assert!(out.status.success(), "gzip -dc {}", path.display());
    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::new();
    let mut each = |item: &Item<'_>| {
        analyzer.on_item(item);
    };
    stream.feed(&out.stdout, &mut each).expect("parses");
    stream.finish(&mut each).expect("ends cleanly");
    let meta = ProfileMeta {
        name: name.into(),
        process: Some("regex-host".into()),
        info: analyzer.info().copied(),
    };
    (analyzer.finish_profile(false), meta)
}

/// One `<g><title>NAME (N samples, P%)</title><rect y=.. width=..%>` of the SVG.
#[derive(Debug)]
struct Frame {
    title: String,
    y: f64,
    width: f64,
}

/// The SVG's title text and frames, read with an XML reader (which fails on malformed XML).
fn parse(svg: &str) -> (String, Vec<Frame>) {
    let mut reader = Reader::from_str(svg);
    let (mut title, mut frames) = (String::new(), Vec::new());
    let (mut in_title, mut in_title_text, mut last_title) = (false, false, String::new());
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Eof => break,
            Event::Start(e) if e.name().as_ref() == b"title" => in_title = true,
            Event::End(e) if e.name().as_ref() == b"title" => in_title = false,
            Event::Start(e) if e.name().as_ref() == b"text" => {
                in_title_text = e
                    .attributes()
                    .any(|a| a.map_or(false, |a| a.value.as_ref() == b"title"));
            }
            Event::End(e) if e.name().as_ref() == b"text" => in_title_text = false,
            Event::Text(t) if in_title => last_title = t.unescape().unwrap().into_owned(),
            Event::Text(t) if in_title_text => title = t.unescape().unwrap().into_owned(),
            Event::Empty(e) if e.name().as_ref() == b"rect" => {
                let attr = |name: &[u8]| {
                    e.attributes()
                        .map(|a| a.unwrap())
                        .find(|a| a.key.as_ref() == name)
                        .map(|a| String::from_utf8(a.value.into_owned()).unwrap())
                };
                if let (Some(y), Some(w)) = (attr(b"y"), attr(b"width")) {
                    if !last_title.is_empty() {
                        frames.push(Frame {
                            title: std::mem::take(&mut last_title),
                            y: y.parse().unwrap(),
                            width: w.trim_end_matches('%').parse().unwrap(),
                        });
                    }
                }
            }
            _ => {}
        }
    }
    (title, frames)
}

fn svg(profile: &Profile, meta: &ProfileMeta, managed_only: bool) -> String {
    let mut out = Vec::new();
    ProfileFormat::Flamegraph
        .write(profile, Selection { managed_only }, meta, &mut out)
        .expect("writes");
    String::from_utf8(out).unwrap()
}

#[test]
fn flamegraph_of_a_regex_busy_capture_shows_the_interpreter_widest() {
    let (profile, meta) = profile("regex-net8.0.4.nettrace.gz");
    assert_eq!(
        ProfileFormat::parse("flamegraph"),
        Ok(ProfileFormat::Flamegraph)
    );
    assert_eq!(ProfileFormat::Flamegraph.extension(), ".svg");
    let text = svg(&profile, &meta, false);
    let (title, frames) = parse(&text);
    // dsipc: PROCESS (pid N), START – END (S s)
    let pid = meta.info.unwrap().process_id;
    assert!(pid > 0);
    assert!(
        title.starts_with(&format!("dsipc: regex-host (pid {}), 20", pid)),
        "{}",
        title
    );
    assert!(
        title.contains('\u{2013}') && title.ends_with(" s)"),
        "{}",
        title
    );
    // The capture's 476 samples all under "all".
    let all = frames
        .iter()
        .find(|f| f.title.starts_with("all ("))
        .unwrap();
    assert_eq!(all.title, "all (476 samples, 100%)");
    let regex = frames
        .iter()
        .filter(|f| f.title.contains("RegexInterpreter"))
        .max_by(|a, b| a.width.partial_cmp(&b.width).unwrap())
        .expect("a RegexInterpreter frame");
    let widest_there = frames
        .iter()
        .filter(|f| f.y == regex.y)
        .max_by(|a, b| a.width.partial_cmp(&b.width).unwrap())
        .unwrap();
    assert_eq!(widest_there.title, regex.title);
    assert!(regex.width > 50.0, "{:?}", regex);

    // --managed-only: the interpreter's samples are managed ones.
    let (_, managed_frames) = parse(&svg(&profile, &meta, true));
    assert!(managed_frames
        .iter()
        .any(|f| f.title.contains("RegexInterpreter")));

    // Same profile, same picture (colours follow the names).
    assert_eq!(svg(&profile, &meta, false), text);
}

#[test]
fn flamegraph_of_no_samples_is_an_error() {
    let (mut profile, meta) = profile("regex-net8.0.4.nettrace.gz");
    profile.threads.clear();
    let mut out = Vec::new();
    let e = ProfileFormat::Flamegraph
        .write(&profile, Selection::default(), &meta, &mut out)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("no sample"), "{}", e);
    assert!(out.is_empty());
}

#[test]
fn flamegraph_frame_names_from_the_trace_cannot_break_the_xml() {
    let (mut profile, meta) = profile("regex-net8.0.4.nettrace.gz");
    for f in profile.frames.iter_mut().take(3) {
        f.push_str(" <&\"'\u{1b}[2J\u{0}\u{FFFF} 12");
    }
    let text = svg(&profile, &meta, false);
    let (_, frames) = parse(&text);
    assert!(frames.iter().any(|f| f.title.contains("<&\"'\u{FFFD}[2J")));
    // No control character (XML 1.0 forbids C0 ones; the reader above does not check).
    assert!(!text.chars().any(|c| c.is_control() && c != '\n'));
    // Leaves ending in a number are not read as a differential column (`N samples, P%; D%`).
    assert!(frames
        .iter()
        .all(|f| f.title.ends_with("%)") && !f.title.contains("%;")));
}
