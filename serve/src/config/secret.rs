//! [`Secret`]: a value (an account key, a SAS token, a secret access key) that is used but
//! never printed.

use std::fmt;

/// What [`Secret`]'s `Debug` and `Display` print, and `config show` writes in place of a
/// secret (dotnet-monitor's placeholder).
pub const REDACTED: &str = ":REDACTED:";

/// A secret value from the configuration. `Debug` and `Display` print [`REDACTED`]; only
/// [`expose`](Secret::expose) gives the value, to the code that sends it.
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

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
}
