//! JSON: the flat objects LoggingEventSource writes (ArgumentsJson, ExceptionJson), read
//! with serde_json.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::{LogValue, LogValues, MAX_ARGUMENTS, MAX_JSON_DEPTH};

pub(super) enum JsonError {
    /// Malformed at this character offset.
    At(usize),
    /// More than MAX_ARGUMENTS members.
    TooMany,
}

/// A JSON object's members as LogObject keeps them: strings, integers, booleans and nulls;
/// a number that is not an `i64` keeps its text (as a string); nested objects and arrays are
/// skipped (bounded by [`MAX_JSON_DEPTH`]).
pub(super) fn parse_object(text: &str) -> Result<LogValues, JsonError> {
    let mut failed = None;
    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = de
        .deserialize_map(Members {
            text,
            failed: &mut failed,
        })
        .and_then(|v| de.end().map(|()| v));
    parsed.map_err(|e| match failed {
        Some(f) => f,
        None => JsonError::At(char_offset(text, &e)),
    })
}

/// The character offset of serde_json's error position (its line, and its column: the
/// bytes before the error on that line).
fn char_offset(text: &str, e: &serde_json::Error) -> usize {
    let line_start: usize = text
        .split_inclusive('\n')
        .take(e.line().saturating_sub(1))
        .map(str::len)
        .sum();
    let mut at = (line_start + e.column()).min(text.len());
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    text[..at].chars().count()
}

/// The top-level object's visitor; `failed` says why it failed where serde_json's error
/// position would not (too many members, nesting too deep inside a member).
struct Members<'t, 'f> {
    text: &'t str,
    failed: &'f mut Option<JsonError>,
}

impl<'de, 't, 'f> Visitor<'de> for Members<'t, 'f> {
    type Value = LogValues;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<LogValues, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let raw: &RawValue = map.next_value()?;
            let v = match self.value(raw)? {
                Some(v) => v,
                None => continue,
            };
            if out.len() >= MAX_ARGUMENTS {
                *self.failed = Some(JsonError::TooMany);
                return Err(de::Error::custom("too many members"));
            }
            out.push((key, v));
        }
        Ok(out)
    }
}

impl<'t, 'f> Members<'t, 'f> {
    /// A member's value from its text (already checked by serde_json): `None` for the
    /// objects and arrays LogObject skips, once their depth is checked.
    fn value<E: de::Error>(&mut self, raw: &RawValue) -> Result<Option<LogValue>, E> {
        let text = raw.get();
        let fail = |failed: &mut Option<JsonError>, at| {
            *failed = Some(JsonError::At(at));
            E::custom("malformed member")
        };
        Ok(Some(match text.as_bytes().first() {
            Some(b'"') => match serde_json::from_str(text) {
                Ok(s) => LogValue::String(s),
                Err(_) => return Err(fail(self.failed, self.offset_of(text))),
            },
            Some(b't') => LogValue::Bool(true),
            Some(b'f') => LogValue::Bool(false),
            Some(b'n') => LogValue::Null,
            Some(b'{' | b'[') => {
                let mut de = serde_json::Deserializer::from_str(text);
                if let Err(e) = Depth(1).deserialize(&mut de) {
                    let at = self.offset_of(text) + char_offset(text, &e);
                    return Err(fail(self.failed, at));
                }
                return Ok(None);
            }
            // A number: an integer, else its text (a fraction, an exponent, out of range).
            _ => match text.parse::<i64>() {
                Ok(n) => LogValue::Number(n),
                Err(_) => LogValue::String(text.to_owned()),
            },
        }))
    }

    /// The character offset of `part` (a slice of the object's text) in the object.
    fn offset_of(&self, part: &str) -> usize {
        let start = (part.as_ptr() as usize).saturating_sub(self.text.as_ptr() as usize);
        self.text.get(..start).map_or(0, |s| s.chars().count())
    }
}

/// Skips a nested object or array at this depth (a member's value is at depth 1), refusing
/// nesting at [`MAX_JSON_DEPTH`] and deeper.
struct Depth(usize);

impl<'de> DeserializeSeed<'de> for Depth {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Depth {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while seq.next_element_seed(Depth(inner))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let inner = self.inner()?;
        while map.next_key::<IgnoredAny>()?.is_some() {
            map.next_value_seed(Depth(inner))?;
        }
        Ok(())
    }
}

impl Depth {
    /// The depth of a container's members, or the error for a container too deep.
    fn inner<E: de::Error>(&self) -> Result<usize, E> {
        if self.0 >= MAX_JSON_DEPTH {
            return Err(E::custom("nested too deep"));
        }
        Ok(self.0 + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_json_objects() {
        let v = match parse_object(
            r#" {"a":"x\"\u00e9\ud83d\ude00","n":-12,"f":1.5,"e":1E+20,"b":true,"z":null,"o":{"p":[1,{}]},"l":[]} "#,
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
                ("e".into(), LogValue::String("1E+20".into())),
                ("b".into(), LogValue::Bool(true)),
                ("z".into(), LogValue::Null),
            ]
        );
        for bad in ["", "{", "{\"a\"}", "{\"a\":}", "[1]", "{} x", "{\"a\":tru}"] {
            assert!(parse_object(bad).is_err(), "{}", bad);
        }
        assert!(matches!(
            parse_object("{\"é\":tru}"),
            Err(JsonError::At(6..=9))
        ));
        let deep = format!("{{\"a\":{}{}}}", "[".repeat(100), "]".repeat(100));
        assert!(matches!(parse_object(&deep), Err(JsonError::At(_))));
        let deepest = format!(
            "{{\"a\":{}{}}}",
            "[".repeat(MAX_JSON_DEPTH - 1),
            "]".repeat(MAX_JSON_DEPTH - 1)
        );
        assert!(parse_object(&deepest).is_ok());
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
