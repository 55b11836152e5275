//! JSON: the flat objects LoggingEventSource writes (ArgumentsJson, ExceptionJson).

use super::{LogValue, LogValues, MAX_ARGUMENTS, MAX_JSON_DEPTH};

pub(super) enum JsonError {
    /// Malformed at this character offset.
    At(usize),
    /// More than MAX_ARGUMENTS members.
    TooMany,
}

struct Json<'a> {
    s: &'a [char],
    i: usize,
}

/// A JSON object's members as LogObject keeps them: strings, integers, booleans and nulls;
/// nested objects and arrays are skipped (bounded by [`MAX_JSON_DEPTH`]).
pub(super) fn parse_object(text: &str) -> Result<LogValues, JsonError> {
    let chars: Vec<char> = text.chars().collect();
    let mut p = Json { s: &chars, i: 0 };
    p.ws();
    let mut out = Vec::new();
    p.expect('{')?;
    p.ws();
    if p.peek() == Some('}') {
        p.i += 1;
    } else {
        loop {
            p.ws();
            let key = p.string()?;
            p.ws();
            p.expect(':')?;
            p.ws();
            if let Some(v) = p.value(1)? {
                if out.len() >= MAX_ARGUMENTS {
                    return Err(JsonError::TooMany);
                }
                out.push((key, v));
            }
            p.ws();
            match p.next() {
                Some(',') => continue,
                Some('}') => break,
                _ => return Err(JsonError::At(p.i)),
            }
        }
    }
    p.ws();
    if p.i != chars.len() {
        return Err(JsonError::At(p.i));
    }
    Ok(out)
}

impl<'a> Json<'a> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }

    fn next(&mut self) -> Option<char> {
        let c = self.peek();
        if c.is_some() {
            self.i += 1;
        }
        c
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(' ' | '\t' | '\n' | '\r')) {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: char) -> Result<(), JsonError> {
        if self.next() == Some(c) {
            Ok(())
        } else {
            Err(JsonError::At(self.i))
        }
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let mut v = 0u32;
        for _ in 0..4 {
            let d = self
                .next()
                .and_then(|c| c.to_digit(16))
                .ok_or(JsonError::At(self.i))?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.expect('"')?;
        let mut out = String::new();
        loop {
            let c = self.next().ok_or(JsonError::At(self.i))?;
            match c {
                '"' => return Ok(out),
                '\\' => {
                    let e = self.next().ok_or(JsonError::At(self.i))?;
                    match e {
                        '"' => out.push('"'),
                        '\\' => out.push('\\'),
                        '/' => out.push('/'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'n' => out.push('\n'),
                        'r' => out.push('\r'),
                        't' => out.push('\t'),
                        'u' => {
                            let u = self.hex4()?;
                            if (0xD800..0xDC00).contains(&u)
                                && self.peek() == Some('\\')
                                && self.s.get(self.i + 1) == Some(&'u')
                            {
                                let save = self.i;
                                self.i += 2;
                                let lo = self.hex4()?;
                                if (0xDC00..0xE000).contains(&lo) {
                                    let cp = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                                    out.push(char::from_u32(cp).unwrap_or('\u{FFFD}'));
                                    continue;
                                }
                                self.i = save;
                            }
                            out.push(char::from_u32(u).unwrap_or('\u{FFFD}'));
                        }
                        _ => return Err(JsonError::At(self.i - 1)),
                    }
                }
                c if (c as u32) < 0x20 => return Err(JsonError::At(self.i - 1)),
                c => out.push(c),
            }
        }
    }

    fn literal(&mut self, word: &str) -> Result<(), JsonError> {
        for w in word.chars() {
            if self.next() != Some(w) {
                return Err(JsonError::At(self.i));
            }
        }
        Ok(())
    }

    /// A value: `None` for the objects and arrays LogObject skips.
    fn value(&mut self, depth: usize) -> Result<Option<LogValue>, JsonError> {
        match self.peek() {
            Some('"') => Ok(Some(LogValue::String(self.string()?))),
            Some('t') => self.literal("true").map(|_| Some(LogValue::Bool(true))),
            Some('f') => self.literal("false").map(|_| Some(LogValue::Bool(false))),
            Some('n') => self.literal("null").map(|_| Some(LogValue::Null)),
            Some('{') | Some('[') => {
                self.skip(depth)?;
                Ok(None)
            }
            Some(c) if c == '-' || c.is_ascii_digit() => {
                let start = self.i;
                while matches!(self.peek(), Some(c) if c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E' || c.is_ascii_digit())
                {
                    self.i += 1;
                }
                let text: String = self.s[start..self.i].iter().collect();
                match text.parse::<i64>() {
                    Ok(n) => Ok(Some(LogValue::Number(n))),
                    Err(_) if text.parse::<f64>().is_ok() => Ok(Some(LogValue::String(text))),
                    Err(_) => Err(JsonError::At(start)),
                }
            }
            _ => Err(JsonError::At(self.i)),
        }
    }

    /// Skips a nested object or array.
    fn skip(&mut self, depth: usize) -> Result<(), JsonError> {
        if depth >= MAX_JSON_DEPTH {
            return Err(JsonError::At(self.i));
        }
        let close = if self.next() == Some('{') { '}' } else { ']' };
        self.ws();
        if self.peek() == Some(close) {
            self.i += 1;
            return Ok(());
        }
        loop {
            self.ws();
            if close == '}' {
                self.string()?;
                self.ws();
                self.expect(':')?;
                self.ws();
            }
            self.value(depth + 1)?;
            self.ws();
            match self.next() {
                Some(',') => continue,
                Some(c) if c == close => return Ok(()),
                _ => return Err(JsonError::At(self.i)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_json_objects() {
        let v = match parse_object(
            r#" {"a":"x\"\u00e9\ud83d\ude00","n":-12,"f":1.5,"b":true,"z":null,"o":{"p":[1,{}]},"l":[]} "#,
        ) {
            Ok(v) => v,
            Err(_) => panic!("parse"),
        };
        assert_eq!(
            v,
            vec![
                ("a".into(), LogValue::String("x\"é😀".into())),
                ("n".into(), LogValue::Number(-12)),
                ("f".into(), LogValue::String("1.5".into())),
                ("b".into(), LogValue::Bool(true)),
                ("z".into(), LogValue::Null),
            ]
        );
        for bad in ["", "{", "{\"a\"}", "{\"a\":}", "[1]", "{} x", "{\"a\":tru}"] {
            assert!(parse_object(bad).is_err(), "{}", bad);
        }
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(matches!(parse_object(&deep), Err(JsonError::At(_))));
        let many = format!(
            "{{{}}}",
            (0..=MAX_ARGUMENTS)
                .map(|i| format!("\"k{}\":\"v\"", i))
                .collect::<Vec<_>>()
                .join(",")
        );
        assert!(matches!(parse_object(&many), Err(JsonError::TooMany)));
    }
}
