//! A counter event's fields by name, borrowing the decoder's buffers.

use crate::LayoutField;

/// A decoded payload field value: a string as a range of the event's text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value {
    Str(u32, u32),
    Num(f64),
    Other,
}

/// An event's fields by name (nested Object fields flattened into the list), borrowing the
/// decoder's buffers: names from the record's layout, values and their text reused from
/// event to event.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fields<'a> {
    pub(crate) names: &'a [LayoutField],
    pub(crate) values: &'a [Value],
    pub(crate) text: &'a str,
}

impl<'a> Fields<'a> {
    pub(crate) fn get(&self, name: &str) -> Option<Value> {
        self.names
            .iter()
            .zip(self.values)
            .find(|(n, _)| &*n.name == name)
            .map(|(_, v)| *v)
    }

    pub(crate) fn get_str(&self, name: &str) -> Option<&'a str> {
        match self.get(name) {
            Some(Value::Str(a, b)) => self.text.get(a as usize..b as usize),
            _ => None,
        }
    }

    pub(crate) fn get_num(&self, name: &str) -> Option<f64> {
        match self.get(name) {
            Some(Value::Num(n)) => Some(n),
            Some(Value::Str(a, b)) => parse_invariant(self.text.get(a as usize..b as usize)?),
            _ => None,
        }
    }
}

/// A number written with the invariant culture (`1.5`, `1E-05`, `NaN` is refused).
pub(crate) fn parse_invariant(s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    if v.is_finite() {
        Some(v)
    } else {
        None
    }
}
