//! .NET's configuration binder as a serde `Deserializer` over a [`Section`]: values are
//! strings converted as .NET converts them (`"true"`, `"5"`, enum names case-insensitive),
//! struct fields match keys case-insensitively, lists are the children `0`, `1`, ...;
//! a key no field reads is a [`Warning`], a value of the wrong type a [`ConfigError`]
//! naming its key and source.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, IntoDeserializer, Visitor};

use super::{ConfigError, Section, Warning};

/// Binds `T` from `section`, adding a warning per key nothing reads to `warnings`.
pub fn bind<'de, T: de::Deserialize<'de>>(
    section: &Section,
    warnings: &mut Vec<Warning>,
) -> Result<T, ConfigError> {
    let sink = RefCell::new(std::mem::take(warnings));
    let result = T::deserialize(Binder {
        section,
        warnings: &sink,
    });
    *warnings = sink.into_inner();
    result.map_err(|e| e.into_config(section))
}

/// The binder's error: a [`ConfigError`] once it knows its key.
#[derive(Debug)]
pub struct BindError {
    key: Option<String>,
    /// A field serde found missing, under `key`.
    missing: Option<String>,
    source: Option<super::Source>,
    message: String,
}

impl BindError {
    /// Names the section it happened in, unless a deeper one already did.
    fn at(mut self, section: &Section) -> BindError {
        if self.key.is_none() {
            self.key = Some(section.path().to_string());
            if self.source.is_none() && section.children().is_empty() {
                self.source = section.source().cloned();
            }
        }
        self
    }

    fn into_config(self, root: &Section) -> ConfigError {
        let e = self.at(root);
        let key = e.key.unwrap_or_default();
        match e.missing {
            Some(field) if key.is_empty() => ConfigError::Missing { key: field },
            Some(field) => ConfigError::Missing {
                key: format!("{}:{}", key, field),
            },
            None => ConfigError::Invalid {
                key,
                source: e.source,
                message: e.message,
            },
        }
    }
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for BindError {}

impl de::Error for BindError {
    fn custom<T: fmt::Display>(msg: T) -> BindError {
        BindError {
            key: None,
            missing: None,
            source: None,
            message: msg.to_string(),
        }
    }

    fn missing_field(field: &'static str) -> BindError {
        BindError {
            key: None,
            missing: Some(field.to_string()),
            source: None,
            message: String::new(),
        }
    }
}

/// One section being bound.
#[derive(Clone, Copy)]
struct Binder<'a> {
    section: &'a Section,
    warnings: &'a RefCell<Vec<Warning>>,
}

impl<'a> Binder<'a> {
    fn child(&self, section: &'a Section) -> Binder<'a> {
        Binder {
            section,
            warnings: self.warnings,
        }
    }

    /// The value, for a key that wants one.
    fn text(&self, wants: &str) -> Result<&'a str, BindError> {
        match self.section.value() {
            Some(v) => Ok(v),
            None if self.section.children().is_empty() => Ok(""),
            None => Err(de::Error::custom(format!(
                "wants {}, and is a section (it has keys under it)",
                wants
            ))),
        }
    }

    fn wrong(&self, wants: &str) -> BindError {
        de::Error::custom(format!("is not {}", wants))
    }

    fn warn(&self, section: &Section, message: &str) {
        self.warnings.borrow_mut().push(Warning {
            key: section.path().to_string(),
            source: first_source(section),
            message: message.to_string(),
        });
    }
}

/// The source of a section's value, or of its first leaf.
fn first_source(section: &Section) -> Option<super::Source> {
    section
        .source()
        .cloned()
        .or_else(|| section.children().iter().find_map(first_source))
}

macro_rules! number {
    ($method:ident, $visit:ident, $t:ty, $what:expr) => {
        fn $method<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
            let text = self.text($what).map_err(|e| e.at(self.section))?;
            let n: $t = text
                .trim()
                .parse()
                .map_err(|_| self.wrong($what).at(self.section))?;
            v.$visit::<BindError>(n).map_err(|e| e.at(self.section))
        }
    };
}

impl<'de, 'a> de::Deserializer<'de> for Binder<'a> {
    type Error = BindError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        if self.section.children().is_empty() {
            match self.section.value() {
                Some(t) => v.visit_str(t),
                None => v.visit_unit(),
            }
        } else if self.section.is_array() {
            self.deserialize_seq(v)
        } else {
            self.deserialize_map(v)
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        // bool.Parse: "True"/"False" in any case, whitespace around allowed.
        let text = self.text("true or false").map_err(|e| e.at(self.section))?;
        let b = match text.trim().to_ascii_lowercase().as_str() {
            "true" => true,
            "false" => false,
            _ => return Err(self.wrong("true or false").at(self.section)),
        };
        v.visit_bool::<BindError>(b).map_err(|e| e.at(self.section))
    }

    number!(
        deserialize_i8,
        visit_i8,
        i8,
        "a whole number from -128 to 127"
    );
    number!(
        deserialize_i16,
        visit_i16,
        i16,
        "a whole number from -32768 to 32767"
    );
    number!(deserialize_i32, visit_i32, i32, "a whole number (32-bit)");
    number!(deserialize_i64, visit_i64, i64, "a whole number (64-bit)");
    number!(deserialize_u8, visit_u8, u8, "a whole number from 0 to 255");
    number!(
        deserialize_u16,
        visit_u16,
        u16,
        "a whole number from 0 to 65535"
    );
    number!(
        deserialize_u32,
        visit_u32,
        u32,
        "a whole number from 0 (32-bit)"
    );
    number!(
        deserialize_u64,
        visit_u64,
        u64,
        "a whole number from 0 (64-bit)"
    );
    number!(deserialize_f32, visit_f32, f32, "a number");
    number!(deserialize_f64, visit_f64, f64, "a number");

    fn deserialize_char<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        self.deserialize_str(v)
    }

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        let text = self.text("a value").map_err(|e| e.at(self.section))?;
        v.visit_str::<BindError>(text)
            .map_err(|e| e.at(self.section))
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        self.deserialize_str(v)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        self.deserialize_str(v)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        self.deserialize_str(v)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        if self.section.exists() {
            v.visit_some(self)
        } else {
            v.visit_none()
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        v.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, BindError> {
        v.visit_unit()
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        v: V,
    ) -> Result<V::Value, BindError> {
        v.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        if self.section.children().is_empty() && !self.section.value().map_or(true, str::is_empty) {
            return Err(self
                .wrong("a list (keys 0, 1, ... under it)")
                .at(self.section));
        }
        v.visit_seq(Children {
            binder: self,
            iter: self.section.children().iter(),
            fields: None,
            value: None,
        })
        .map_err(|e| e.at(self.section))
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, _len: usize, v: V) -> Result<V::Value, BindError> {
        self.deserialize_seq(v)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        v: V,
    ) -> Result<V::Value, BindError> {
        self.deserialize_seq(v)
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        self.sections_only()?;
        v.visit_map(Children {
            binder: self,
            iter: self.section.children().iter(),
            fields: None,
            value: None,
        })
        .map_err(|e| e.at(self.section))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, BindError> {
        self.sections_only()?;
        v.visit_map(Children {
            binder: self,
            iter: self.section.children().iter(),
            fields: Some(fields),
            value: None,
        })
        .map_err(|e| e.at(self.section))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, BindError> {
        // Enum.Parse(ignoreCase: true): the name in any case.
        let text = self.text("a name").map_err(|e| e.at(self.section))?;
        let found = variants
            .iter()
            .find(|n| n.eq_ignore_ascii_case(text.trim()))
            .ok_or_else(|| {
                self.wrong(&format!("one of {}", variants.join(", ")))
                    .at(self.section)
            })?;
        let d: de::value::StrDeserializer<'_, BindError> = found.into_deserializer();
        v.visit_enum(d).map_err(|e| e.at(self.section))
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        self.deserialize_str(v)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, BindError> {
        v.visit_unit()
    }
}

impl<'a> Binder<'a> {
    /// A key that wants a section and holds a value instead (`"Metrics": "on"`).
    fn sections_only(&self) -> Result<(), BindError> {
        if self.section.children().is_empty() && !self.section.value().map_or(true, str::is_empty) {
            return Err(self.wrong("a section (keys under it)").at(self.section));
        }
        Ok(())
    }
}

/// A section's children, as a list's items or a map's (or struct's) entries.
struct Children<'a, I> {
    binder: Binder<'a>,
    iter: I,
    /// A struct's field names: keys match them case-insensitively; other keys warn.
    fields: Option<&'static [&'static str]>,
    value: Option<&'a Section>,
}

impl<'de, 'a, I: Iterator<Item = &'a Section>> de::SeqAccess<'de> for Children<'a, I> {
    type Error = BindError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, BindError> {
        match self.iter.next() {
            Some(c) => seed
                .deserialize(self.binder.child(c))
                .map(Some)
                .map_err(|e| e.at(c)),
            None => Ok(None),
        }
    }
}

impl<'de, 'a, I: Iterator<Item = &'a Section>> de::MapAccess<'de> for Children<'a, I> {
    type Error = BindError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, BindError> {
        for c in self.iter.by_ref() {
            let key: &str = match self.fields {
                None => c.key(),
                Some(fields) => match fields.iter().find(|f| f.eq_ignore_ascii_case(c.key())) {
                    Some(f) => f,
                    None => {
                        self.binder.warn(c, "unknown key: nothing reads it");
                        continue;
                    }
                },
            };
            self.value = Some(c);
            let d: de::value::StrDeserializer<'_, BindError> = key.into_deserializer();
            return seed.deserialize(d).map(Some);
        }
        Ok(None)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, BindError> {
        let c = self
            .value
            .take()
            .ok_or_else(|| <BindError as de::Error>::custom("a value before its key"))?;
        // A type's own check (a TimeSpan's text) fails after the value was read: named here.
        seed.deserialize(self.binder.child(c)).map_err(|e| e.at(c))
    }
}
