//! [`Secret`]: a value (an account key, a SAS token, a secret access key, an API key's
//! hash) that is used but never printed: the configuration binds it, egress signs with it.

use std::fmt;

/// What [`Secret`]'s `Debug` and `Display` print, and `config show` writes in place of a
/// secret (dotnet-monitor's placeholder).
pub const REDACTED: &str = ":REDACTED:";

/// A secret value (from the configuration, or given to an egress client). `Debug` and
/// `Display` print [`REDACTED`], so that it cannot reach a log, an error, an answer or
/// `/operations`; only [`expose`](Secret::expose) gives the value, to the code that signs or
/// sends with it. The default is empty (not configured).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the one place that needs it (signing a request...).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is empty or only blanks (not configured).
    pub fn is_empty(&self) -> bool {
        self.0.trim().is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", REDACTED)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_debug_and_display_never_print_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{}", s), ":REDACTED:");
        assert_eq!(format!("{:?}", s), "Secret(:REDACTED:)");
        assert_eq!(format!("{:?}", Some(s.clone())), "Some(Secret(:REDACTED:))");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn secret_of_blanks_is_not_configured() {
        assert!(Secret::default().is_empty());
        assert!(Secret::new(" \n").is_empty());
        assert!(!Secret::new("k").is_empty());
    }
}
