//! The command-line parser every command uses: positionals, `--name VALUE` /
//! `--name=VALUE` options and flags, `--` ending the options. lexopt splits the arguments
//! ([`parse_os`] adds the rules on top). Arguments are `OsString`s: any byte sequence is
//! taken, and a value that must be text says so with a usage error (never a panic).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

/// The parsed arguments of one subcommand.
#[derive(Debug, Default)]
pub struct Parsed {
    pub positionals: Vec<OsString>,
    values: BTreeMap<&'static str, OsString>,
    flags: BTreeSet<&'static str>,
}

/// A usage error: the message is printed with the usage text.
#[derive(Debug)]
pub struct UsageError(pub String);

pub fn usage<T>(msg: impl Into<String>) -> Result<T, UsageError> {
    Err(UsageError(msg.into()))
}

/// Options every subcommand accepts.
pub const GLOBAL_VALUES: &[&str] = &["--tmpdir", "--timeout"];

/// An argument for a message: lossy, quoted, control characters escaped.
/// A very long argument is cut to its first 100 characters (and says so).
pub fn show(arg: &OsStr) -> String {
    const KEEP: usize = 100;
    let lossy = arg.to_string_lossy();
    match lossy.char_indices().nth(KEEP) {
        Some((cut, _)) => format!("{:?}... ({} bytes in all)", &lossy[..cut], arg.len()),
        None => format!("{:?}", lossy),
    }
}

/// `-` then a digit: a negative number given where a positional is expected (a PID).
fn negative_number(arg: &OsStr) -> bool {
    let lossy = arg.to_string_lossy();
    let mut c = lossy.chars();
    c.next() == Some('-') && c.next().map_or(false, |d| d.is_ascii_digit())
}

/// Parses `args` (text arguments; see [`parse_os`]).
pub fn parse(
    args: &[String],
    values: &[&'static str],
    flags: &[&'static str],
) -> Result<Parsed, UsageError> {
    let os: Vec<OsString> = args.iter().map(OsString::from).collect();
    parse_os(&os, values, flags)
}

/// Parses `args` with the option names `values` (take a value) and `flags` (do not).
/// Short names are spelled in the lists too (`-o`).
///
/// lexopt splits the arguments; the rules on top of it: `-` alone is a positional, `--`
/// ends the options, `-` then a digit is a positional (a negative PID, refused later by
/// [`pid`]), a short option is a whole argument (`-o FILE`; `-ofile`, `-o=file` and `-ab`
/// are unknown options), a flag takes no `=VALUE`, and an option given twice is an error.
pub fn parse_os(
    args: &[OsString],
    values: &[&'static str],
    flags: &[&'static str],
) -> Result<Parsed, UsageError> {
    let mut out = Parsed::default();
    let mut parser = lexopt::Parser::from_args(args.iter().cloned());
    loop {
        // Every argument before this one was used up whole (options are whole arguments),
        // so the next one is at hand: a negative number is taken as it is, and anything
        // else is kept for messages (the option as typed, `=VALUE` and all).
        let raw = match parser.try_raw_args() {
            Some(mut rest) => {
                if let Some(number) = rest.next_if(negative_number) {
                    out.positionals.push(number);
                    continue;
                }
                rest.peek().map(OsStr::to_os_string).unwrap_or_default()
            }
            None => OsString::new(),
        };
        let (name, short) = match parser.next() {
            Ok(None) => break,
            Ok(Some(lexopt::Arg::Value(v))) => {
                out.positionals.push(v);
                continue;
            }
            Ok(Some(lexopt::Arg::Long(long))) => (format!("--{}", long), false),
            Ok(Some(lexopt::Arg::Short(short))) => (format!("-{}", short), true),
            Err(e) => return usage(e.to_string()),
        };
        // `-ab`, `-ofile`, `-o=file`: lexopt would go on inside the argument; a short
        // option is a whole argument here (the argument is then an unknown option).
        let partial = short && parser.try_raw_args().is_none();
        let known_value = values
            .iter()
            .chain(GLOBAL_VALUES.iter())
            .find(|&&v| v == name);
        let known_flag = flags.iter().find(|&&f| f == name);
        match (known_value, known_flag) {
            (Some(&known), _) if !partial => {
                let value = match parser.value() {
                    Ok(v) => v,
                    Err(lexopt::Error::MissingValue { .. }) => {
                        return usage(format!("{} needs a value", name))
                    }
                    Err(e) => return usage(e.to_string()),
                };
                if out.values.insert(known, value).is_some() {
                    return usage(format!("{} given more than once", known));
                }
            }
            (None, Some(&known)) if !partial => {
                if parser.optional_value().is_some() {
                    return usage(format!("{} takes no value", name));
                }
                out.flags.insert(known);
            }
            _ => {
                let known: Vec<&str> = values
                    .iter()
                    .chain(flags.iter())
                    .chain(GLOBAL_VALUES.iter())
                    .copied()
                    .collect();
                let hint = if name.starts_with("--") {
                    did_you_mean(&name, &known)
                } else {
                    String::new()
                };
                return usage(format!("unknown option {}{}", show(&raw), hint));
            }
        }
    }
    Ok(out)
}

/// `" (did you mean X?)"` for the known name closest to `given` (at most 2 edits, or a
/// third of its length), else nothing.
pub fn did_you_mean(given: &str, known: &[&str]) -> String {
    let distance = |a: &str, b: &str| {
        let b: Vec<char> = b.chars().collect();
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut prev = row[0];
            row[0] = i + 1;
            for (j, &cb) in b.iter().enumerate() {
                let cur = row[j + 1];
                row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(cur + 1);
                prev = cur;
            }
        }
        row[b.len()]
    };
    let best = known
        .iter()
        .map(|k| (distance(&given.to_ascii_lowercase(), k), *k))
        .min();
    match best {
        Some((d, k)) if d > 0 && d <= 2.max(given.chars().count() / 3) => {
            format!(" (did you mean {}?)", k)
        }
        _ => String::new(),
    }
}

/// A process id: a positive integer.
pub fn pid(value: &OsStr) -> Result<u32, UsageError> {
    match value.to_str().map(str::parse::<u32>) {
        Some(Ok(p)) if p > 0 => Ok(p),
        _ => usage(format!(
            "PID must be a positive integer, not {}",
            show(value)
        )),
    }
}

/// The longest duration any option takes (about 31 years, far past any session).
const MAX_SECONDS: f64 = 1e9;

/// The one rule for every option that takes a time (`--duration`, `--timeout`,
/// `--refresh-interval`): seconds, fractions allowed (`1.5`), or dotnet-trace's and
/// dotnet-counters' `[dd:]hh:mm:ss` (seconds may have a fraction: `00:00:02.5`). Zero,
/// negative or unreadable values are usage errors with one message.
pub fn duration(what: &str, value: &OsStr) -> Result<Duration, UsageError> {
    let bad = || {
        usage(format!(
            "{} wants a positive number of seconds (1.5) or dd:hh:mm:ss, not {}",
            what,
            show(value)
        ))
    };
    let s = match value.to_str() {
        Some(s) => s.trim(),
        None => return bad(),
    };
    let seconds = if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() < 3 || parts.len() > 4 {
            return bad();
        }
        let (whole, last) = parts.split_at(parts.len() - 1);
        let mut units = Vec::new();
        for p in whole {
            // Days, hours and minutes are whole numbers of digits.
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) || p.len() > 9 {
                return bad();
            }
            units.push(p.parse::<f64>().unwrap_or(f64::INFINITY));
        }
        let secs = match last[0].parse::<f64>() {
            Ok(v) if last[0].bytes().all(|b| b.is_ascii_digit() || b == b'.') => v,
            _ => return bad(),
        };
        let (days, hours, minutes) = match units[..] {
            [d, h, m] => (d, h, m),
            [h, m] => (0.0, h, m),
            _ => return bad(),
        };
        if hours >= 24.0 && units.len() == 3 || minutes >= 60.0 || secs >= 60.0 {
            return bad();
        }
        ((days * 24.0 + hours) * 60.0 + minutes) * 60.0 + secs
    } else {
        match s.parse::<f64>() {
            Ok(v) => v,
            Err(_) => return bad(),
        }
    };
    if seconds.is_finite() && seconds > 0.0 && seconds < MAX_SECONDS {
        Ok(Duration::from_secs_f64(seconds))
    } else {
        bad()
    }
}

/// `value` as text, or a usage error naming `what`.
pub fn text<'a>(what: &str, value: &'a OsStr) -> Result<&'a str, UsageError> {
    value.to_str().map_or_else(
        || {
            usage(format!(
                "{} must be valid UTF-8 (the runtime takes UTF-16 text), not {}",
                what,
                show(value)
            ))
        },
        Ok,
    )
}

/// `value` as a path, refusing an empty one (it would mean the current directory).
pub fn path(what: &str, value: &OsStr) -> Result<PathBuf, UsageError> {
    if value.is_empty() {
        return usage(format!("{} must not be empty", what));
    }
    Ok(PathBuf::from(value))
}

impl Parsed {
    /// The value of option `name`, when it is text (`None` for bytes that are not UTF-8:
    /// use [`value_os`](Self::value_os) or [`value_text`](Self::value_text)).
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).and_then(|s| s.to_str())
    }

    /// The value of option `name`, as given.
    pub fn value_os(&self, name: &str) -> Option<&OsStr> {
        self.values.get(name).map(|s| s.as_os_str())
    }

    /// The value of option `name` as text; a usage error when it is not UTF-8.
    pub fn value_text(&self, name: &str) -> Result<Option<&str>, UsageError> {
        match self.value_os(name) {
            Some(v) => text(name, v).map(Some),
            None => Ok(None),
        }
    }

    /// The value of option `name` as lowercase text: for options that take one of a few
    /// names (`--format Speedscope`, `--type Full`), matched case-insensitively as the
    /// dotnet-* tools match them.
    pub fn value_lower(&self, name: &str) -> Result<Option<String>, UsageError> {
        Ok(self.value_text(name)?.map(str::to_ascii_lowercase))
    }

    /// The value of option `name` as a non-empty path.
    pub fn value_path(&self, name: &str) -> Result<Option<PathBuf>, UsageError> {
        match self.value_os(name) {
            Some(v) => path(name, v).map(Some),
            None => Ok(None),
        }
    }

    /// The value of option `short` or its long spelling `long`; both given is an error.
    pub fn value_alias(&self, short: &str, long: &str) -> Result<Option<&OsStr>, UsageError> {
        match (self.value_os(short), self.value_os(long)) {
            (Some(_), Some(_)) => usage(format!(
                "{} and {} are the same option: give one",
                short, long
            )),
            (a, b) => Ok(a.or(b)),
        }
    }

    /// True if flag `name` was given.
    pub fn flag(&self, name: &str) -> bool {
        self.flags.contains(name)
    }

    /// Exactly `names.len()` positionals (named in the error message).
    pub fn expect_positionals(&self, names: &[&str]) -> Result<(), UsageError> {
        if self.positionals.len() < names.len() {
            return usage(format!("missing {}", names[self.positionals.len()]));
        }
        if self.positionals.len() > names.len() {
            return usage(format!(
                "unexpected argument {}",
                show(&self.positionals[names.len()])
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn options_and_positionals() {
        let p = parse(
            &v(&[
                "12",
                "-o",
                "f",
                "--duration=3",
                "--no-rundown",
                "--timeout",
                "2",
            ]),
            &["-o", "--duration"],
            &["--no-rundown"],
        )
        .unwrap();
        assert_eq!(p.positionals, vec![OsString::from("12")]);
        assert_eq!(p.value("-o"), Some("f"));
        assert_eq!(p.value("--duration"), Some("3"));
        assert_eq!(p.value("--timeout"), Some("2"));
        assert!(p.flag("--no-rundown"));
        assert!(parse(&v(&["--bogus"]), &[], &[]).is_err());
        assert!(parse(&v(&["-o"]), &["-o"], &[]).is_err());
        let p = parse(&v(&["1", "--", "--x"]), &[], &[]).unwrap();
        assert_eq!(p.positionals, vec![OsString::from("1"), "--x".into()]);
        assert!(p.expect_positionals(&["PID", "NAME"]).is_ok());
        assert!(p.expect_positionals(&["PID"]).is_err());
        assert!(path("-o", OsStr::new("")).is_err());
        // A repeated option is refused, not silently overridden.
        let twice = parse(&v(&["1", "--timeout", "1", "--timeout=2"]), &[], &[]);
        assert!(twice
            .unwrap_err()
            .0
            .contains("--timeout given more than once"));
        // A negative number is a (bad) positional, not an unknown option.
        let p = parse(&v(&["-1"]), &[], &[]).unwrap();
        assert_eq!(p.positionals, vec![OsString::from("-1")]);
        // Long arguments are cut in messages.
        let long = "x".repeat(100_000);
        assert!(show(OsStr::new(&long)).len() < 200);
        assert!(show(OsStr::new(&"é".repeat(150))).ends_with("(300 bytes in all)"));
    }

    #[test]
    fn edge_cases_of_the_split() {
        let err = |args: &[&str], values: &[&'static str], flags: &[&'static str]| {
            parse(&v(args), values, flags).unwrap_err().0
        };
        // `-` alone is a positional (stdout); so is anything after `--`, and a negative
        // number, also after `--` and between options.
        let p = parse(&v(&["-", "-5", "--", "-o", "-7"]), &["-o"], &[]).unwrap();
        assert_eq!(
            p.positionals,
            v(&["-", "-5", "-o", "-7"])
                .iter()
                .map(OsString::from)
                .collect::<Vec<_>>()
        );
        assert_eq!(p.value("-o"), None);
        // A value is the next argument whatever it looks like.
        let p = parse(&v(&["-o", "--", "--timeout", "-x", "1"]), &["-o"], &[]).unwrap();
        assert_eq!(p.value("-o"), Some("--"));
        assert_eq!(p.value("--timeout"), Some("-x"));
        assert_eq!(p.positionals, vec![OsString::from("1")]);
        // `--name=` is an empty value, not a missing one.
        let p = parse(&v(&["--timeout="]), &[], &[]).unwrap();
        assert_eq!(p.value("--timeout"), Some(""));
        assert_eq!(
            err(&["1", "--timeout"], &[], &[]),
            "--timeout needs a value"
        );
        assert_eq!(err(&["-o"], &["-o"], &[]), "-o needs a value");
        // Flags take no value; a repeated flag is the flag.
        assert_eq!(
            err(&["--json=1"], &[], &["--json"]),
            "--json takes no value"
        );
        assert!(parse(&v(&["--json", "--json"]), &[], &["--json"])
            .unwrap()
            .flag("--json"));
        // Unknown options are named as typed, value and all.
        assert_eq!(
            err(&["--bogus=x"], &[], &[]),
            "unknown option \"--bogus=x\""
        );
        assert_eq!(err(&["-x"], &[], &[]), "unknown option \"-x\"");
        assert_eq!(err(&["---"], &[], &[]), "unknown option \"---\"");
        assert_eq!(err(&["--=1"], &[], &[]), "unknown option \"--=1\"");
        // A short option is a whole argument: no `-ofile`, `-o=file` or `-fg` clusters.
        for bad in ["-ofile", "-o=file", "-fg", "-f=1", "-of"] {
            assert_eq!(
                err(&[bad], &["-o"], &["-f", "-g"]),
                format!("unknown option \"{}\"", bad)
            );
        }
        // A name in the value list takes a value; `-o` given as `-o` and `--output` is
        // two options (value_alias refuses the pair).
        let p = parse(&v(&["-o", "a", "--output", "b"]), &["-o", "--output"], &[]).unwrap();
        assert!(p.value_alias("-o", "--output").is_err());
    }

    #[cfg(unix)]
    #[test]
    fn non_utf8_arguments_are_kept_or_refused_never_a_panic() {
        use std::os::unix::ffi::OsStringExt;
        let bad = OsString::from_vec(b"/tmp/\xff".to_vec());
        let mut inline = b"--tmpdir=".to_vec();
        inline.extend_from_slice(b"/x\xfe");
        let args = vec![
            OsString::from("1"),
            OsString::from("-o"),
            bad.clone(),
            OsString::from_vec(inline),
        ];
        let p = parse_os(&args, &["-o"], &[]).unwrap();
        assert_eq!(p.value_os("-o"), Some(bad.as_os_str()));
        assert_eq!(p.value("-o"), None);
        assert!(p.value_text("-o").is_err());
        assert_eq!(p.value_path("-o").unwrap(), Some(PathBuf::from(&bad)));
        assert!(p.value_os("--tmpdir").is_some());
        let unknown = vec![OsString::from_vec(b"--\xff".to_vec())];
        assert!(parse_os(&unknown, &[], &[]).is_err());
    }
}

#[cfg(test)]
mod duration_tests {
    use super::*;

    fn d(s: &str) -> Result<Duration, UsageError> {
        duration("--duration", OsStr::new(s))
    }

    #[test]
    fn durations_take_seconds_or_dd_hh_mm_ss() {
        assert_eq!(d("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(d("10").unwrap(), Duration::from_secs(10));
        assert_eq!(d("00:00:30").unwrap(), Duration::from_secs(30));
        assert_eq!(d("00:01:30").unwrap(), Duration::from_secs(90));
        assert_eq!(d("01:00:00:05").unwrap(), Duration::from_secs(86_405));
        assert_eq!(d("00:00:00:02.5").unwrap(), Duration::from_millis(2500));
        for bad in [
            "0",
            "-1",
            "nan",
            "inf",
            "",
            "1:2",
            "00:00:60",
            "00:60:00",
            "00:00:00",
            "a:b:c",
            "1:2:3:4:5",
            "00:-1:00",
            "1e300",
            "00:00:1e3",
            " : : ",
        ] {
            let e = d(bad)
                .err()
                .unwrap_or_else(|| panic!("{:?} was accepted", bad));
            assert!(
                e.0.contains("positive number of seconds (1.5) or dd:hh:mm:ss"),
                "{}",
                e.0
            );
        }
    }
}
