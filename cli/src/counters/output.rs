//! dotnet-counters' file formats (csv, json) and its console table.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::SystemTime;

use dsipc_trace::counters::{CounterKind, Sample};

pub use dsipc_trace::format::civil;

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
        crate::json::string(process),
        invariant_time(start)
    )
}

/// One json event (without the separating comma).
pub fn json_event(s: &Sample) -> String {
    format!(
        "{{ \"timestamp\": \"{}\",  \"provider\": {},  \"name\": {},  \"tags\": {},  \"counterType\": \"{}\",  \"value\": {} }}",
        universal_time(s.timestamp),
        crate::json::string(&s.provider),
        crate::json::string(&display(s)),
        crate::json::string(&tags(s)),
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

/// The monitor's table: the latest value of every counter, by provider (and, with
/// dotnet-counters' `--showDeltas`, its change since the value before).
#[derive(Default)]
pub struct Table {
    /// Provider → counter → (value as shown, its change since the previous one).
    rows: BTreeMap<String, BTreeMap<String, (String, Option<String>)>>,
    /// The last value of each (provider, counter), for the deltas.
    last: BTreeMap<(String, String), f64>,
    notices: Vec<String>,
    show_deltas: bool,
}

impl Table {
    /// A table with a Last Delta column (dotnet-counters' `--showDeltas`).
    pub fn with_deltas(mut self, on: bool) -> Table {
        self.show_deltas = on;
        self
    }

    /// Updates a row.
    pub fn sample(&mut self, s: &Sample) {
        // Runtime-supplied text reaches the terminal escaped (no control sequences).
        let mut name = display(s);
        let t = tags(s);
        if !t.is_empty() {
            name = format!("{} [{}]", name, t);
        }
        let provider = crate::term::clean(&s.provider).into_owned();
        let name = crate::term::clean(&name).into_owned();
        let delta = self
            .last
            .insert((provider.clone(), name.clone()), s.value)
            .map(|before| number_grouped(s.value - before));
        self.rows
            .entry(provider)
            .or_default()
            .insert(name, (number_grouped(s.value), delta));
    }

    /// Adds a notice shown under the table (the last few), escaped for the terminal.
    pub fn notice(&mut self, n: String) {
        let n = crate::term::clean(&n).into_owned();
        if !self.notices.contains(&n) {
            self.notices.push(n);
        }
        if self.notices.len() > 5 {
            self.notices.remove(0);
        }
    }

    /// The table as text in dotnet-counters' layout, fitted to a terminal of `size`
    /// (columns, rows) so that it redraws in place: every line is shorter than the terminal
    /// (a full line would wrap on some terminals), names too long are shortened with `...`,
    /// never wrapped, notices are folded at spaces, and rows past the last line are counted
    /// in a last line instead of scrolling the screen.
    pub fn render(&self, status: &str, size: (usize, usize)) -> String {
        let (width, height) = size;
        let mut lines = self.lines(status, width);
        // The cursor stays on the last line: at most height - 1 lines, with a newline each.
        let max = height.max(5) - 1;
        if lines.len() > max {
            let hidden = lines.len() - (max - 1);
            lines.truncate(max - 1);
            lines.push(fit(
                &format!(
                    "({} more lines: a taller terminal or --counters shows them)",
                    hidden
                ),
                width.max(40) - 1,
            ));
        }
        let mut out = String::new();
        for l in lines {
            out.push_str(&l);
            out.push('\n');
        }
        out
    }

    /// Every line of the table, fitted to `width` columns.
    fn lines(&self, status: &str, width: usize) -> Vec<String> {
        // One column spare; a table narrower than 40 columns is not worth fitting.
        let room = width.max(40) - 1;
        let value_w = self
            .rows
            .values()
            .flat_map(|r| r.values())
            .map(|(v, _)| v.chars().count())
            .chain(std::iter::once("Current Value".len()))
            .max()
            .unwrap_or(0)
            .min(room / 4);
        let delta_w = if self.show_deltas {
            self.rows
                .values()
                .flat_map(|r| r.values())
                .filter_map(|(_, d)| d.as_ref().map(|d| d.chars().count()))
                .chain(std::iter::once("Last Delta".len()))
                .max()
                .unwrap_or(0)
                .min(room / 4)
        } else {
            0
        };
        // (the delta column and its separating space, when shown)
        let delta_room = if self.show_deltas { delta_w + 1 } else { 0 };
        let name_w = room - 4 - 1 - value_w - delta_room;
        let delta = |d: &str| {
            if self.show_deltas {
                format!(" {:>dw$}", fit(d, delta_w), dw = delta_w)
            } else {
                String::new()
            }
        };
        let mut out: Vec<String> = Vec::new();
        out.push(fit("Press p to pause, r to resume, q to quit.", room));
        out.push(fit(&format!("    Status: {}", status), room));
        out.push(String::new());
        out.push(format!(
            "    {:<nw$} {:>vw$}{}",
            "Name",
            "Current Value",
            delta("Last Delta"),
            nw = name_w,
            vw = value_w
        ));
        for (provider, rows) in &self.rows {
            out.push(fit(&format!("[{}]", provider), room));
            for (name, (value, change)) in rows {
                out.push(format!(
                    "    {:<nw$} {:>vw$}{}",
                    fit(name, name_w),
                    fit(value, value_w),
                    delta(change.as_deref().unwrap_or("")),
                    nw = name_w,
                    vw = value_w
                ));
            }
        }
        // Notices first after the header: they stay on screen when rows are cut.
        let mut notes = Vec::new();
        for n in &self.notices {
            notes.extend(fold(n, room));
            notes.push(String::new());
        }
        out.splice(3..3, notes);
        out
    }
}

/// `s` in at most `w` columns: shortened with `...` when longer.
fn fit(s: &str, w: usize) -> String {
    if s.chars().count() <= w {
        return s.to_string();
    }
    let keep = w.saturating_sub(3);
    let mut out: String = s.chars().take(keep).collect();
    out.push_str(&"..."[..w.min(3)]);
    out
}

/// `s` folded at spaces into lines of at most `w` columns (a word longer than that is cut).
fn fold(s: &str, w: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in s.split(' ') {
        let len = line.chars().count();
        if len > 0 && len + 1 + word.chars().count() > w {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
        if line.chars().count() > w {
            lines.push(fit(&line, w));
            line.clear();
        }
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// A value with thousands separators and at most three decimals, as the console shows it.
pub fn number_grouped(v: f64) -> String {
    if !v.is_finite() {
        return number(v);
    }
    let s = format!("{:.3}", v.abs());
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let frac = frac.trim_end_matches('0');
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let mut out = String::new();
    if v < 0.0 && (grouped != "0" || !frac.is_empty()) {
        out.push('-');
    }
    out.push_str(&grouped);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsipc_trace::counters::Source;
    use std::time::{Duration, UNIX_EPOCH};

    fn sample(kind: CounterKind) -> Sample {
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

    #[test]
    fn the_table_fits_its_terminal_and_shows_deltas_when_asked() {
        let mut s = sample(CounterKind::Sum);
        let mut table = Table::default().with_deltas(true);
        table.sample(&s);
        s.value = 7.5;
        table.sample(&s);
        s.name =
            "a-counter-with-a-name-far-too-long-for-an-80-column-terminal-to-show-whole".into();
        s.display_name = s.name.clone();
        table.sample(&s);
        let text = table.render("Running", (80, 24));
        assert!(text.contains("Current Value Last Delta"), "{}", text);
        assert!(text.contains("7.5        5.5"), "{}", text);
        for line in text.lines() {
            assert!(line.chars().count() < 80, "{:?}", line);
        }
        // The long name is shortened, not wrapped.
        assert!(
            text.contains("a-counter-with-a-name-far-too-long-for-an"),
            "{}",
            text
        );
        assert!(text.contains("... "), "{}", text);
        // Without --showDeltas, no such column.
        let plain = Table::default().render("Running", (80, 24));
        assert!(!plain.contains("Last Delta"), "{}", plain);
        // A short terminal: the rows past its last line are counted there.
        let short = table.render("Running", (80, 6));
        assert_eq!(short.lines().count(), 5, "{}", short);
        assert!(
            short.lines().last().unwrap().contains("more lines"),
            "{}",
            short
        );
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
        assert_eq!(number_grouped(1234567.5), "1,234,567.5");
        assert_eq!(number_grouped(0.0), "0");
        assert_eq!(number_grouped(-12.25), "-12.25");
    }
}
