//! The query string: its parameters ([`Params`]) and their values.

use std::time::Duration;

use hyper::body::Incoming;
use hyper::Request;

use dsipc::payload::DumpType;

use super::ApiError;
use crate::operations::Egress;
use crate::procs::Selector;
/// The query's parameters, percent-decoded (`+` is a space); the last of a repeated
/// name wins, as ASP.NET's binder takes a single value.
pub fn query(req: &Request<Incoming>) -> Result<Vec<(String, String)>, ApiError> {
    let q = match req.uri().query() {
        Some(q) => q,
        None => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.push((decode(k)?, decode(v)?));
    }
    Ok(out)
}

/// `s` percent-decoded (`+` is a space).
pub(super) fn decode(s: &str) -> Result<String, ApiError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = |c: u8| (c as char).to_digit(16);
                match (
                    b.get(i + 1).and_then(|&c| hex(c)),
                    b.get(i + 2).and_then(|&c| hex(c)),
                ) {
                    (Some(h), Some(l)) => out.push((h * 16 + l) as u8),
                    _ => {
                        return Err(ApiError::bad_request(
                            "The query holds a malformed percent escape.",
                        ))
                    }
                }
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("The query is not UTF-8 text."))
}

/// A query's parameters by name (case-insensitive, as ASP.NET binds them).
pub struct Params(pub(super) Vec<(String, String)>);

impl Params {
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// These parameters but `name`.
    pub(super) fn without(&self, name: &str) -> Params {
        Params(
            self.0
                .iter()
                .filter(|(k, _)| !k.eq_ignore_ascii_case(name))
                .cloned()
                .collect(),
        )
    }

    /// `name`'s value as ASP.NET binds a nullable or a string parameter (`int? pid`,
    /// `Guid? uid`, `string name`): an empty or blank value is no value.
    fn nullable(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.trim().is_empty())
    }

    /// `name` as an `int` parameter: an empty value is not valid.
    pub(crate) fn int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        int32(name, self.get(name))
    }

    /// `name` as an `int?` parameter (`pid`): an empty value is none.
    pub(crate) fn nullable_int(&self, name: &str) -> Result<Option<i64>, ApiError> {
        int32(name, self.nullable(name))
    }

    pub(crate) fn selector(&self) -> Result<Selector, ApiError> {
        let pid = match self.nullable_int("pid")? {
            None => None,
            Some(p) if p > 0 => Some(p as u32),
            Some(p) => {
                return Err(ApiError::invalid(
                    "pid",
                    format!("The value '{}' is not valid.", p),
                ))
            }
        };
        let uid = match self.nullable("uid") {
            None => None,
            Some(u) if is_guid(u) => Some(u.to_ascii_lowercase()),
            Some(u) => {
                return Err(ApiError::invalid(
                    "uid",
                    format!("The value '{}' is not valid.", u),
                ))
            }
        };
        Ok(Selector {
            pid,
            uid,
            name: self.nullable("name").map(str::to_string),
        })
    }

    /// `durationSeconds`: -1 (until the client goes away) or 0 and up; `None` for -1.
    pub(crate) fn duration(&self, default: i64) -> Result<Option<Duration>, ApiError> {
        let secs = self.int("durationSeconds")?.unwrap_or(default);
        match secs {
            -1 => Ok(None),
            s if s >= 0 => Ok(Some(Duration::from_secs(s as u64))),
            _ => Err(ApiError::invalid(
                "durationSeconds",
                "The field durationSeconds must be between -1 and 2147483647.",
            )),
        }
    }

    /// `egressProvider`: `None` to send the artifact in the response, else the provider.
    pub(crate) fn egress<'a>(&self, egress: &'a [Egress]) -> Result<Option<&'a Egress>, ApiError> {
        match self.get("egressProvider") {
            None | Some("") => Ok(None),
            Some(p) => match egress.iter().find(|e| e.name.eq_ignore_ascii_case(p)) {
                Some(e) => Ok(Some(e)),
                None => Err(ApiError::invalid(
                    "egressProvider",
                    format!("Egress provider '{}' does not exist.", p),
                )),
            },
        }
    }

    /// `tags`: comma separated, each trimmed, empty ones dropped, each at most once.
    pub(crate) fn tags(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for t in self.get("tags").unwrap_or("").split(',').map(str::trim) {
            if !t.is_empty() && !out.iter().any(|o| o == t) {
                out.push(t.to_string());
            }
        }
        out
    }
}

/// `value` of parameter `name` as an int32.
fn int32(name: &str, value: Option<&str>) -> Result<Option<i64>, ApiError> {
    match value {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<i32>()
            .map(|n| Some(i64::from(n)))
            .map_err(|_| ApiError::invalid(name, format!("The value '{}' is not valid.", v))),
    }
}

fn is_guid(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 36
        && b.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

pub(super) fn dump_type(t: &str) -> Result<DumpType, ApiError> {
    match t.to_ascii_lowercase().as_str() {
        "mini" => Ok(DumpType::Normal),
        "full" => Ok(DumpType::Full),
        "withheap" => Ok(DumpType::WithHeap),
        "triage" => Ok(DumpType::Triage),
        _ => Err(ApiError::invalid(
            "type",
            format!("The value '{}' is not valid.", t),
        )),
    }
}
