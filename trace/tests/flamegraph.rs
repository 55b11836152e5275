//! Flame graphs (`ProfileFormat::Flamegraph`) of the committed Regex-busy .NET 8 capture
//! (tests/data/nettrace/regex-net8.0.4.nettrace.gz): the SVG is well-formed XML (checked
//! here: dsipc-trace keeps no dev-dependency, the Windows build tests it), titled with
//! the process and the trace's time span, and its widest frame at the Regex interpreter's
//! depth is the interpreter's; `--managed-only` keeps the managed samples only; a profile
//! without samples is an error, not an empty picture.
#![cfg(feature = "flamegraph")]

mod common_captures;
use common_captures::{capture, profile_of};

use dsipc_trace::format::{ProfileFormat, ProfileMeta, Selection};
use dsipc_trace::Profile;

fn profile(name: &str) -> (Profile, ProfileMeta) {
    profile_of(&capture(name), name, Some("regex-host"))
}

/// One `<g><title>NAME (N samples, P%)</title><rect y=.. width=..%>` of the SVG.
#[derive(Debug)]
struct Frame {
    title: String,
    y: f64,
    width: f64,
}

/// `t` with XML's predefined entities and character references replaced; panics on text
/// that is not well-formed XML character data (a `<`, a bare `&`, a control character).
fn unescape(t: &str) -> String {
    assert!(!t.contains('<'), "`<` in text: {:?}", t);
    assert!(
        !t.chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')),
        "a control character in {:?}",
        t
    );
    let mut out = String::new();
    let mut rest = t;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let semi = rest[amp..].find(';').expect("an entity ends with ;") + amp;
        let name = &rest[amp + 1..semi];
        out.push(match name {
            "lt" => '<',
            "gt" => '>',
            "amp" => '&',
            "quot" => '"',
            "apos" => '\'',
            _ => {
                let code = match name.strip_prefix("#x") {
                    Some(hex) => u32::from_str_radix(hex, 16),
                    None => name.strip_prefix('#').expect("a known entity").parse(),
                };
                char::from_u32(code.expect("a character reference")).unwrap()
            }
        });
        rest = &rest[semi + 1..];
    }
    out.push_str(rest);
    out
}

/// A start tag's name and attributes (`name="value"` pairs, values unescaped).
fn tag(body: &str) -> (&str, Vec<(&str, String)>) {
    let body = body.trim();
    let name_end = body.find(char::is_whitespace).unwrap_or(body.len());
    let (name, mut rest) = body.split_at(name_end);
    let mut attrs = Vec::new();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            return (name, attrs);
        }
        let eq = rest.find("=\"").expect("attribute=\"value\"");
        let close = rest[eq + 2..].find('"').expect("a closing quote") + eq + 2;
        attrs.push((rest[..eq].trim(), unescape(&rest[eq + 2..close])));
        rest = &rest[close + 1..];
    }
}

/// The SVG's title text and frames, reading it as XML: every element closed in order, text
/// and attribute values well-formed (panics otherwise).
fn parse(svg: &str) -> (String, Vec<Frame>) {
    let (mut title, mut frames) = (String::new(), Vec::new());
    // Open elements: name, and whether it is the `<text id="title">`.
    let mut open: Vec<(&str, bool)> = Vec::new();
    let mut last_title = String::new();
    let mut rest = svg;
    while let Some(lt) = rest.find('<') {
        let text = unescape(&rest[..lt]);
        match open.last() {
            Some(("title", _)) => last_title = text,
            Some(("text", true)) => title = text,
            _ => {}
        }
        rest = &rest[lt..];
        let skip = |open: &str, close: &str| -> Option<usize> {
            if rest.starts_with(open) {
                Some(rest.find(close).expect("a closed section") + close.len())
            } else {
                None
            }
        };
        let used = if let Some(n) = skip("<![CDATA[", "]]>")
            .or_else(|| skip("<!--", "-->"))
            .or_else(|| skip("<?", "?>"))
            .or_else(|| skip("<!", ">"))
        {
            n
        } else {
            let gt = rest.find('>').expect("a tag ends with >");
            let body = &rest[1..gt];
            if let Some(name) = body.strip_prefix('/') {
                assert_eq!(open.pop().map(|o| o.0), Some(name.trim()), "closing tag");
            } else {
                let empty = body.ends_with('/');
                let (name, attrs) = tag(body.trim_end_matches('/'));
                let attr = |n: &str| attrs.iter().find(|a| a.0 == n).map(|a| a.1.clone());
                if name == "rect" && !last_title.is_empty() {
                    if let (Some(y), Some(w)) = (attr("y"), attr("width")) {
                        frames.push(Frame {
                            title: std::mem::take(&mut last_title),
                            y: y.parse().unwrap(),
                            width: w.trim_end_matches('%').parse().unwrap(),
                        });
                    }
                }
                if !empty {
                    open.push((
                        name,
                        name == "text" && attr("id").as_deref() == Some("title"),
                    ));
                }
            }
            gt + 1
        };
        rest = &rest[used..];
    }
    assert!(
        rest.trim().is_empty() && open.is_empty(),
        "unclosed: {:?}",
        open
    );
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
    // Leaves ending in a number are not read as a differential column (`N samples, P%; D%`).
    assert!(frames
        .iter()
        .all(|f| f.title.ends_with("%)") && !f.title.contains("%;")));
}
