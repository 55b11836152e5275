//! Just enough JSON output for `dsipc info --json` and `dsipc monitor --json`.

use std::fmt::Write;

/// A flat JSON object, written in insertion order.
pub struct Object {
    out: String,
}

/// The one JSON string escaping (the trace layer's): every JSON the CLI writes goes through
/// it (`info --json`, `monitor --json`, `convert`, `counters`).
pub use dsipc_trace::format::{json_string as string, push_json_string as push_string};

impl Object {
    pub fn new() -> Self {
        Object {
            out: String::from("{"),
        }
    }

    fn key(&mut self, k: &str) {
        if self.out.len() > 1 {
            self.out.push(',');
        }
        push_string(&mut self.out, k);
        self.out.push(':');
    }

    pub fn number(&mut self, k: &str, v: u64) {
        self.key(k);
        let _ = write!(self.out, "{}", v);
    }

    pub fn boolean(&mut self, k: &str, v: bool) {
        self.key(k);
        self.out.push_str(if v { "true" } else { "false" });
    }

    pub fn string(&mut self, k: &str, v: &str) {
        self.key(k);
        push_string(&mut self.out, v);
    }

    pub fn opt_string(&mut self, k: &str, v: Option<&str>) {
        match v {
            Some(v) => self.string(k, v),
            None => {
                self.key(k);
                self.out.push_str("null");
            }
        }
    }

    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::string;

    #[test]
    fn strings_escape_quotes_and_everything_that_could_drive_a_terminal() {
        assert_eq!(string("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(string("\n\r\t"), r#""\n\r\t""#);
        assert_eq!(string("\u{8}\u{1b}[2J"), r#""\u0008\u001b[2J""#);
        assert_eq!(
            string("\u{7f}\u{9b}\u{2028}\u{202e}"),
            r#""\u007f\u009b\u2028\u202e""#
        );
        assert_eq!(string("Regex.Match(é)"), "\"Regex.Match(é)\"");
    }
}
