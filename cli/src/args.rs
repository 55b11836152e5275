//! A small command-line parser: positionals, `--name VALUE` / `--name=VALUE` options and
//! flags, `--` ending the options.

use std::collections::{BTreeMap, BTreeSet};

/// The parsed arguments of one subcommand.
#[derive(Debug, Default)]
pub struct Parsed {
    pub positionals: Vec<String>,
    values: BTreeMap<&'static str, String>,
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

/// Parses `args` with the option names `values` (take a value) and `flags` (do not).
/// Short names are spelled in the lists too (`-o`).
pub fn parse(
    args: &[String],
    values: &[&'static str],
    flags: &[&'static str],
) -> Result<Parsed, UsageError> {
    let mut out = Parsed::default();
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if options_done || arg == "-" || !arg.starts_with('-') {
            out.positionals.push(arg.clone());
            continue;
        }
        if arg == "--" {
            options_done = true;
            continue;
        }
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        if let Some(&known) = values
            .iter()
            .chain(GLOBAL_VALUES.iter())
            .find(|&&v| v == name)
        {
            let value = match inline {
                Some(v) => v,
                None => {
                    if i >= args.len() {
                        return usage(format!("{} needs a value", name));
                    }
                    i += 1;
                    args[i - 1].clone()
                }
            };
            out.values.insert(known, value);
        } else if let Some(&known) = flags.iter().find(|&&f| f == name) {
            if inline.is_some() {
                return usage(format!("{} takes no value", name));
            }
            out.flags.insert(known);
        } else {
            return usage(format!("unknown option {}", arg));
        }
    }
    Ok(out)
}

impl Parsed {
    /// The value of option `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(|s| s.as_str())
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
                self.positionals[names.len()]
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
        assert_eq!(p.positionals, v(&["12"]));
        assert_eq!(p.value("-o"), Some("f"));
        assert_eq!(p.value("--duration"), Some("3"));
        assert_eq!(p.value("--timeout"), Some("2"));
        assert!(p.flag("--no-rundown"));
        assert!(parse(&v(&["--bogus"]), &[], &[]).is_err());
        assert!(parse(&v(&["-o"]), &["-o"], &[]).is_err());
        let p = parse(&v(&["1", "--", "--x"]), &[], &[]).unwrap();
        assert_eq!(p.positionals, v(&["1", "--x"]));
        assert!(p.expect_positionals(&["PID", "NAME"]).is_ok());
        assert!(p.expect_positionals(&["PID"]).is_err());
    }
}
