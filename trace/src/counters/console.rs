//! dotnet-counters' console table (`dotnet-counters monitor`): the latest value of every
//! counter by provider, fitted to a terminal so that it redraws in place (the file formats
//! are [`files`](super::files)).

use std::collections::BTreeMap;

use super::files::{display, number, tags};
use super::Sample;
use crate::format::{clean, group_thousands};

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
        let provider = clean(&s.provider).into_owned();
        let name = clean(&name).into_owned();
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
        let n = clean(&n).into_owned();
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
    let grouped = group_thousands(int);
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
    use crate::counters::files::tests::sample;
    use crate::counters::CounterKind;

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

    #[test]
    fn numbers_grouped_in_thousands() {
        assert_eq!(number_grouped(1234567.5), "1,234,567.5");
        assert_eq!(number_grouped(0.0), "0");
        assert_eq!(number_grouped(-12.25), "-12.25");
    }
}
