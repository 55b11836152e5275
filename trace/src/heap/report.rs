//! dotnet-gcdump report's output: one [`Row`] per type, written as its text table under the
//! heap's totals ([`text`]) or as one line of JSON ([`json`]).

use super::gcdump::GcDump;
use super::{HeapGraph, RetainedStat, TypeStat};
use crate::format::{clean, group_thousands, to_json};

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Row {
    /// The type's name (JSON `type`).
    #[serde(rename = "type")]
    pub name: String,
    /// Its objects.
    pub count: u64,
    /// Their bytes.
    pub bytes: u64,
    /// What they retain (`--retained`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retained: Option<u64>,
}

/// The rows of a type report.
pub fn plain_rows(stats: Vec<TypeStat>) -> Vec<Row> {
    stats
        .into_iter()
        .map(|t| Row {
            name: t.name,
            count: t.count,
            bytes: t.bytes,
            retained: None,
        })
        .collect()
}

/// The rows of a retained-size report.
pub fn retained_rows(stats: Vec<RetainedStat>) -> Vec<Row> {
    stats
        .into_iter()
        .map(|t| Row {
            name: t.name,
            count: t.count,
            bytes: t.bytes,
            retained: Some(t.retained),
        })
        .collect()
}

/// The report's rows of a heap walk: per type, biggest first; with `retained`, what each
/// type retains too, biggest retained first.
pub fn graph_rows(graph: &HeapGraph, retained: bool) -> Vec<Row> {
    if retained {
        retained_rows(graph.retained_stats())
    } else {
        plain_rows(graph.type_stats())
    }
}

/// The report's rows of a `.gcdump`, as [`graph_rows`].
pub fn dump_rows(dump: &GcDump, retained: bool) -> Vec<Row> {
    if retained {
        retained_rows(dump.retained_stats())
    } else {
        plain_rows(dump.type_stats())
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    group_thousands(&n.to_string())
}

/// dotnet-gcdump report's layout: the totals (bytes, objects), then one line per type,
/// biggest first (with --retained, a Retained Bytes column, biggest retained first).
pub fn text(totals: (u64, u64), rows: &[Row]) -> String {
    let mut out = format!(
        "{:>15}  GC Heap bytes\n{:>15}  GC Heap objects\n\n",
        thousands(totals.0),
        thousands(totals.1)
    );
    let retained = rows.first().map_or(false, |r| r.retained.is_some());
    if retained {
        out.push_str(&format!(
            "{:>15}  {:>15}  {:>9}  Type\n",
            "Object Bytes", "Retained Bytes", "Count"
        ));
    } else {
        out.push_str(&format!("{:>15}  {:>9}  Type\n", "Object Bytes", "Count"));
    }
    for t in rows {
        out.push_str(&format!("{:>15}  ", thousands(t.bytes)));
        if let Some(r) = t.retained {
            out.push_str(&format!("{:>15}  ", thousands(r)));
        }
        out.push_str(&format!("{:>9}  {}\n", thousands(t.count), clean(&t.name)));
    }
    out
}

/// `[{"type":NAME,"count":N,"bytes":N},...]` (and `"retained":N` with --retained), one
/// line.
pub fn json(rows: &[Row]) -> String {
    to_json(rows) + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    fn stats() -> Vec<Row> {
        vec![
            Row {
                name: "System.Version".into(),
                count: 10_002,
                bytes: 320_064,
                retained: None,
            },
            Row {
                name: "Evil\u{1b}[2J\"".into(),
                count: 1,
                bytes: 24,
                retained: None,
            },
        ]
    }

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[test]
    fn json_is_an_array_with_names_escaped() {
        assert_eq!(
            json(&stats()),
            "[{\"type\":\"System.Version\",\"count\":10002,\"bytes\":320064},{\"type\":\"Evil\\u001b[2J\\\"\",\"count\":1,\"bytes\":24}]\n"
        );
        assert_eq!(json(&[]), "[]\n");
    }

    #[test]
    fn text_rows_have_names_cleaned() {
        let t = text((320_088, 10_003), &stats());
        assert_eq!(
            t,
            concat!(
                "        320,088  GC Heap bytes\n",
                "         10,003  GC Heap objects\n\n",
                "   Object Bytes      Count  Type\n",
                "        320,064     10,002  System.Version\n",
                "             24          1  Evil\\x1b[2J\"\n"
            )
        );
    }

    #[test]
    fn retained_adds_a_column_and_a_field() {
        let mut rows = stats();
        rows[0].retained = Some(400_000);
        rows[1].retained = Some(24);
        let t = text((1, 1), &rows[..1]);
        assert!(t.ends_with(
            "   Object Bytes   Retained Bytes      Count  Type\n        320,064          400,000     10,002  System.Version\n"
        ), "{}", t);
        assert_eq!(
            json(&rows[..1]),
            "[{\"type\":\"System.Version\",\"count\":10002,\"bytes\":320064,\"retained\":400000}]\n"
        );
    }
}
