//! Logging shim: `trace!`/`debug!` go to defmt when the `defmt` feature is on, otherwise
//! they compile to nothing (their arguments are still type-checked). Also small formatting
//! helpers shared by `Display` impls.

#![allow(unused_macros)]

#[cfg(feature = "defmt")]
macro_rules! trace {
    ($($arg:expr),* $(,)?) => { defmt::trace!($($arg),*) };
}

#[cfg(not(feature = "defmt"))]
macro_rules! trace {
    ($fmt:expr $(, $arg:expr)* $(,)?) => {{ let _ = ($fmt $(, &$arg)*); }};
}

#[cfg(feature = "defmt")]
macro_rules! debug {
    ($($arg:expr),* $(,)?) => { defmt::debug!($($arg),*) };
}

#[cfg(not(feature = "defmt"))]
macro_rules! debug {
    ($fmt:expr $(, $arg:expr)* $(,)?) => {{ let _ = ($fmt $(, &$arg)*); }};
}

pub(crate) use debug;
pub(crate) use trace;

/// Writes bytes as a quoted ASCII string, escaping everything that is not printable.
pub(crate) fn write_escaped(f: &mut core::fmt::Formatter<'_>, bytes: &[u8]) -> core::fmt::Result {
    use core::fmt::Write;
    f.write_char('"')?;
    for &b in bytes {
        for c in core::ascii::escape_default(b) {
            f.write_char(c as char)?;
        }
    }
    f.write_char('"')
}
