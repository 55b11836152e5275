//! dotnet-counters' file formats (csv, json), byte for byte, and the texts they share with
//! its console (display names, tags, .NET's number and date formats).

use std::io::{self, Write};
use std::time::SystemTime;

use super::{CounterKind, Sample};
use crate::format::{civil, json_string};

/// .NET's invariant `DateTime.ToString()`: `MM/dd/yyyy HH:mm:ss` (UTC here).
pub fn invariant_time(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{:02}/{:02}/{:04} {:02}:{:02}:{:02}", mo, d, y, h, mi, s)
}

/// .NET's `DateTime.ToString("u")`: `yyyy-MM-dd HH:mm:ssZ`.
pub fn universal_time(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = civil(t);
    format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02}Z", y, mo, d, h, mi, s)
}

/// .NET's invariant `double.ToString()` for the values counters carry.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        }
    } else {
        format!("{}", v)
    }
}

/// dotnet-counters' display name: `CPU Usage (%)`, `Gen 0 GC Count (Count / 1 sec)`.
pub fn display(s: &Sample) -> String {
    let base = if s.display_name.is_empty() {
        &s.name
    } else {
        &s.display_name
    };
    if s.kind.is_increment() {
        let unit = if s.unit.is_empty() { "Count" } else { &s.unit };
        format!("{} ({} / {} sec)", base, unit, number(s.interval_secs))
    } else if s.unit.is_empty() {
        base.to_string()
    } else {
        format!("{} ({})", base, s.unit)
    }
}

/// Tags as dotnet-counters prints them (`k=v,k2=v2`, `Percentile=95` for histograms).
pub fn tags(s: &Sample) -> String {
    let mut out: Vec<String> = s.tags.iter().map(|(k, v)| format!("{}={}", k, v)).collect();
    if let CounterKind::Percentile(q) = s.kind {
        out.push(format!("Percentile={}", number(q * 100.0)));
    }
    out.join(",")
}

/// The csv header, byte for byte dotnet-counters'.
pub const CSV_HEADER: &str = "Timestamp,Provider,Counter Name,Counter Type,Mean/Increment\n";

/// `field` as one CSV field (RFC 4180): quoted, with quotes doubled, when it holds a comma,
/// a quote, a line break or a leading/trailing space; as it is otherwise.
pub fn csv_field(field: &str) -> std::borrow::Cow<'_, str> {
    let needs =
        field.contains([',', '"', '\n', '\r']) || field.starts_with(' ') || field.ends_with(' ');
    if needs {
        std::borrow::Cow::Owned(format!("\"{}\"", field.replace('"', "\"\"")))
    } else {
        std::borrow::Cow::Borrowed(field)
    }
}

/// One csv row: five fields whatever the runtime put in names, units and tags.
pub fn csv_row(s: &Sample) -> String {
    let mut name = display(s);
    let t = tags(s);
    if !t.is_empty() {
        name.push('[');
        name.push_str(&t.replace(',', ";"));
        name.push(']');
    }
    format!(
        "{},{},{},{},{}\n",
        invariant_time(s.timestamp),
        csv_field(&s.provider),
        csv_field(&name),
        s.kind.dotnet_counters_type(),
        number(s.value)
    )
}

/// The json file's opening, byte for byte dotnet-counters' layout.
pub fn json_header(process: &str, start: SystemTime) -> String {
    format!(
        "{{ \"TargetProcess\": {}, \"StartTime\": \"{}\", \"Events\": [",
        json_string(process),
        invariant_time(start)
    )
}

/// One json event (without the separating comma).
pub fn json_event(s: &Sample) -> String {
    format!(
        "{{ \"timestamp\": \"{}\",  \"provider\": {},  \"name\": {},  \"tags\": {},  \"counterType\": \"{}\",  \"value\": {} }}",
        universal_time(s.timestamp),
        json_string(&s.provider),
        json_string(&display(s)),
        json_string(&tags(s)),
        s.kind.dotnet_counters_type(),
        number(s.value)
    )
}

/// The json file's closing.
pub const JSON_FOOTER: &str = "]}";

/// A counters file being written: csv or json.
pub struct FileWriter<W: Write> {
    out: W,
    json: bool,
    events: u64,
}

impl<W: Write> FileWriter<W> {
    /// Writes the header.
    pub fn new(mut out: W, json: bool, process: &str, start: SystemTime) -> io::Result<Self> {
        if json {
            out.write_all(json_header(process, start).as_bytes())?;
        } else {
            out.write_all(CSV_HEADER.as_bytes())?;
        }
        out.flush()?;
        Ok(FileWriter {
            out,
            json,
            events: 0,
        })
    }

    /// Writes one sample.
    pub fn sample(&mut self, s: &Sample) -> io::Result<()> {
        if self.json {
            if self.events > 0 {
                self.out.write_all(b",")?;
            }
            self.out.write_all(json_event(s).as_bytes())?;
        } else {
            self.out.write_all(csv_row(s).as_bytes())?;
        }
        self.events += 1;
        Ok(())
    }

    /// Flushes what was written (after each batch, so a crash loses little).
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Samples written.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Writes the closing and flushes.
    pub fn finish(mut self) -> io::Result<W> {
        if self.json {
            self.out.write_all(JSON_FOOTER.as_bytes())?;
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::counters::Source;
    use std::time::{Duration, UNIX_EPOCH};

    /// A System.Runtime sample at 2021-10-26 10:48:03 UTC (the console's tests use it too).
    pub(in crate::counters) fn sample(kind: CounterKind) -> Sample {
        Sample {
            // 2021-10-26 10:48:03 UTC
            timestamp: UNIX_EPOCH + Duration::from_secs(1_635_245_283),
            provider: "System.Runtime".into(),
            name: "gen-0-gc-count".into(),
            display_name: "Gen 0 GC Count".into(),
            unit: String::new(),
            kind,
            value: 2.0,
            tags: Vec::new(),
            interval_secs: 1.0,
            source: Source::EventCounter,
        }
    }

    /// Splits one RFC 4180 record (quoted fields, doubled quotes) into its fields.
    fn rfc4180_fields(row: &str) -> Vec<String> {
        let row = row.strip_suffix('\n').expect("a row ends its line");
        let (mut fields, mut cur, mut quoted, mut chars) =
            (Vec::new(), String::new(), false, row.chars().peekable());
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    cur.push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(std::mem::take(&mut cur)),
                (c, _) => cur.push(c),
            }
        }
        assert!(!quoted, "unterminated quote in {:?}", row);
        fields.push(cur);
        fields
    }

    #[test]
    fn csv_rows_quote_names_units_and_tags_rfc4180() {
        let mut s = sample(CounterKind::Gauge);
        s.provider = "My,Meter \"x\"".into();
        s.display_name = "line\nbreak, \"quoted\"".into();
        s.unit = "a,b".into();
        s.tags = vec![("k\r\n".into(), "v,\"w\"".into())];
        let row = csv_row(&s);
        // One physical record: its line breaks are inside quotes.
        let fields = rfc4180_fields(&row);
        assert_eq!(fields.len(), 5, "{:?} -> {:?}", row, fields);
        assert_eq!(fields[1], "My,Meter \"x\"");
        assert_eq!(fields[2], "line\nbreak, \"quoted\" (a,b)[k\r\n=v;\"w\"]");
        assert_eq!(fields[4], "2");
        // Plain fields stay unquoted, byte for byte dotnet-counters'.
        assert_eq!(csv_field("System.Runtime"), "System.Runtime");
    }

    #[test]
    fn dotnet_counters_layouts() {
        assert_eq!(
            csv_row(&sample(CounterKind::Sum)),
            "10/26/2021 10:48:03,System.Runtime,Gen 0 GC Count (Count / 1 sec),Rate,2\n"
        );
        let mut s = sample(CounterKind::Percentile(0.95));
        s.tags = vec![("a".into(), "1".into()), ("b".into(), "2".into())];
        s.unit = "ms".into();
        assert_eq!(
            csv_row(&s),
            "10/26/2021 10:48:03,System.Runtime,Gen 0 GC Count (ms)[a=1;b=2;Percentile=95],Metric,2\n"
        );
        let mut w = FileWriter::new(Vec::new(), true, "py\"thon", s.timestamp).unwrap();
        w.sample(&sample(CounterKind::Mean)).unwrap();
        w.sample(&sample(CounterKind::Mean)).unwrap();
        let text = String::from_utf8(w.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            "{ \"TargetProcess\": \"py\\\"thon\", \"StartTime\": \"10/26/2021 10:48:03\", \"Events\": [\
             { \"timestamp\": \"2021-10-26 10:48:03Z\",  \"provider\": \"System.Runtime\",  \"name\": \"Gen 0 GC Count\",  \"tags\": \"\",  \"counterType\": \"Metric\",  \"value\": 2 },\
             { \"timestamp\": \"2021-10-26 10:48:03Z\",  \"provider\": \"System.Runtime\",  \"name\": \"Gen 0 GC Count\",  \"tags\": \"\",  \"counterType\": \"Metric\",  \"value\": 2 }]}"
        );
    }
}
