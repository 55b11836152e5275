//! Message formats: LogValuesFormatter.

#[derive(Debug)]
enum Segment {
    Text(String),
    Hole { index: usize, align: i64 },
}

/// A message format (`"Request {Id} took {Elapsed,8} ms"`) as LogValuesFormatter reads it:
/// holes are named, `{{` and `}}` are literal braces.
#[derive(Debug)]
pub(super) struct Template {
    pub(super) names: Vec<String>,
    segments: Vec<Segment>,
}

/// LogValuesFormatter.FindBraceIndex: the first unescaped `brace` from `start`.
fn find_brace(f: &[char], brace: char, start: usize, end: usize) -> usize {
    let mut index = end;
    let mut count = 0usize;
    let mut i = start;
    while i < end {
        if count > 0 && f[i] != brace {
            if count % 2 == 0 {
                count = 0;
                index = end;
            } else {
                break;
            }
        } else if f[i] == brace {
            if brace == '}' {
                if count == 0 {
                    index = i;
                }
            } else {
                index = i;
            }
            count += 1;
        }
        i += 1;
    }
    index
}

/// Literal text of a composite format: `{{` and `}}` are one brace.
fn unescape(s: &[char], out: &mut String) {
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if (c == '{' || c == '}') && s.get(i + 1) == Some(&c) {
            i += 1;
        }
        out.push(c);
        i += 1;
    }
}

impl Template {
    pub(super) fn parse(format: &str) -> Template {
        let f: Vec<char> = format.chars().collect();
        let end = f.len();
        let mut names = Vec::new();
        let mut segments = Vec::new();
        let mut scan = 0;
        while scan < end {
            let open = find_brace(&f, '{', scan, end);
            if scan == 0 && open == end {
                break;
            }
            let close = find_brace(&f, '}', open, end);
            if close == end {
                let mut t = String::new();
                unescape(&f[scan..end], &mut t);
                segments.push(Segment::Text(t));
                scan = end;
            } else {
                let mut t = String::new();
                unescape(&f[scan..open], &mut t);
                segments.push(Segment::Text(t));
                let delim = (open..close)
                    .find(|&i| f[i] == ',' || f[i] == ':')
                    .unwrap_or(close);
                names.push(f[open + 1..delim].iter().collect());
                let mut align = 0i64;
                if delim < close && f[delim] == ',' {
                    let spec: String = f[delim + 1..close]
                        .iter()
                        .take_while(|&&c| c != ':')
                        .collect();
                    align = spec.trim().parse::<i64>().unwrap_or(0).clamp(-4096, 4096);
                }
                segments.push(Segment::Hole {
                    index: names.len() - 1,
                    align,
                });
                scan = close + 1;
            }
        }
        Template { names, segments }
    }

    /// The format filled in with `values` (one per hole; `None` prints `(null)`).
    pub(super) fn format(&self, values: &[Option<String>]) -> String {
        let mut out = String::new();
        for s in &self.segments {
            match s {
                Segment::Text(t) => out.push_str(t),
                Segment::Hole { index, align } => {
                    let v = values
                        .get(*index)
                        .and_then(|v| v.as_deref())
                        .unwrap_or("(null)");
                    let width = align.unsigned_abs() as usize;
                    let len = v.chars().count();
                    let pad = width.saturating_sub(len);
                    if *align > 0 {
                        out.extend(std::iter::repeat(' ').take(pad));
                        out.push_str(v);
                    } else {
                        out.push_str(v);
                        out.extend(std::iter::repeat(' ').take(pad));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_as_log_values_formatter() {
        let t = Template::parse("Request {Id} took {Elapsed,6} ms {{literal}}");
        assert_eq!(t.names, vec!["Id", "Elapsed"]);
        assert_eq!(
            t.format(&[Some("7".into()), Some("12".into())]),
            "Request 7 took     12 ms {literal}"
        );
        assert_eq!(
            t.format(&[None, Some("1".into())]),
            "Request (null) took      1 ms {literal}"
        );
        let t = Template::parse("{A,-4}|{B:x}");
        assert_eq!(t.names, vec!["A", "B"]);
        assert_eq!(t.format(&[Some("a".into()), Some("b".into())]), "a   |b");
        assert!(Template::parse("no holes {{ here").names.is_empty());
        assert!(Template::parse("").names.is_empty());
    }
}
