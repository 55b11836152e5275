//! Flame graph SVGs as inferno writes them (`dsipc convert|trace --format flamegraph`): each
//! frame a `<g><title>NAME (N samples, P%)</title><rect x=.. y=.. width=..% ...>`.

/// One frame of a flame graph.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The frame's name (the title without its `(N samples, P%)`), unescaped.
    pub name: String,
    /// Its samples.
    pub samples: u64,
    /// Its row (the rect's `y`: one per stack depth).
    pub y: String,
    /// Its width, percent of the graph.
    pub width: f64,
}

/// `s` with XML's five predefined entities replaced.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The value of `name="..."` in `tag`.
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let start = tag.find(&format!(" {}=\"", name))? + name.len() + 3;
    let len = tag[start..].find('"')?;
    Some(&tag[start..start + len])
}

/// The SVG's title line (`<text id="title" ...>`), unescaped.
pub fn title(svg: &str) -> String {
    let at = svg.find("<text id=\"title\"").expect("a title");
    let text = &svg[at..];
    let start = text.find('>').unwrap() + 1;
    let end = text.find("</text>").unwrap();
    unescape(&text[start..end])
}

/// Every frame of `svg` (panics on a frame that is not `<title>..</title><rect ...>`).
pub fn frames(svg: &str) -> Vec<Frame> {
    let mut out = Vec::new();
    for part in svg.split("<g><title>").skip(1) {
        let end = part.find("</title>").expect("</title>");
        let title = unescape(&part[..end]);
        let rest = &part[end + "</title>".len()..];
        assert!(
            rest.starts_with("<rect "),
            "{:?}",
            &rest[..rest.len().min(80)]
        );
        let rect = &rest[..rest.find("/>").expect("<rect .../>")];
        let open = title.rfind(" (").expect("(N samples, P%)");
        let samples = title[open + 2..]
            .split(' ')
            .next()
            .unwrap()
            .replace(',', "")
            .parse()
            .unwrap_or_else(|_| panic!("samples in {:?}", title));
        out.push(Frame {
            name: title[..open].to_string(),
            samples,
            y: attr(rect, "y").expect("y").to_string(),
            width: attr(rect, "width")
                .expect("width")
                .trim_end_matches('%')
                .parse()
                .unwrap(),
        });
    }
    out
}

/// The widest frame whose name contains `what`, and the widest frame in its row (the depth
/// where `what` has its widest tower).
pub fn widest_in_the_row_of(frames: &[Frame], what: &str) -> (Frame, Frame) {
    let widest = |f: &mut dyn Iterator<Item = &Frame>| {
        f.max_by(|a, b| a.width.partial_cmp(&b.width).unwrap())
            .cloned()
    };
    let mine = widest(&mut frames.iter().filter(|f| f.name.contains(what)))
        .unwrap_or_else(|| panic!("no frame names {}", what));
    let row = widest(&mut frames.iter().filter(|f| f.y == mine.y)).unwrap();
    (mine, row)
}
