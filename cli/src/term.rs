//! Terminal and signal helpers: is stderr a terminal, Ctrl-C as a counter, and text made
//! safe for a terminal.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};

static INTERRUPTS: AtomicUsize = AtomicUsize::new(0);

/// True once Ctrl-C (SIGINT) or SIGTERM arrived after [`catch_interrupts`].
pub fn interrupted() -> bool {
    interrupts() > 0
}

/// How many times Ctrl-C (or SIGTERM) arrived after [`catch_interrupts`].
pub fn interrupts() -> usize {
    INTERRUPTS.load(Ordering::SeqCst)
}

/// Prints to stderr, ignoring failures (a closed or full stderr must not panic).
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use note;

/// As [`note!`] without the line end.
macro_rules! note_inline {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use note_inline;

/// True for characters that move the cursor, start an escape sequence or reorder text
/// (the trace layer's rule, shared with its JSON escaping).
pub(crate) use dsipc_trace::format::unsafe_char;

/// `s` with control characters escaped (`\n`, `\r`, `\t`, `\0`, `\x1b`, `\u{202e}`), so
/// that text a runtime or a file name supplies can neither drive the terminal nor fake
/// extra lines. Borrowed when there is nothing to escape.
pub fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(unsafe_char) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if unsafe_char(c) && (c as u32) < 0x100 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if unsafe_char(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(unix)]
mod imp {
    use super::*;

    // `c_int` is `i32` on every Unix Rust supports.
    extern "C" fn on_signal(_: i32) {
        // The first asks for a stop, the second for an exit that keeps what was received;
        // a third leaves at once (only async-signal-safe calls).
        if INTERRUPTS.fetch_add(1, Ordering::SeqCst) >= 2 {
            // SAFETY: _exit is async-signal-safe.
            unsafe { libc::_exit(130) };
        }
    }

    pub fn catch_interrupts() {
        for sig in [libc::SIGINT, libc::SIGTERM] {
            // SAFETY: installs a handler that only touches an atomic and calls _exit.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(i32) as usize;
                libc::sigemptyset(&mut action.sa_mask);
                // No SA_RESTART: a blocking read returns EINTR and the loop looks at the flag.
                action.sa_flags = 0;
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
    }

    pub fn stderr_is_terminal() -> bool {
        // SAFETY: isatty on a descriptor number has no memory effects.
        unsafe { libc::isatty(2) == 1 }
    }
}

#[cfg(not(unix))]
mod imp {
    pub fn catch_interrupts() {}
    pub fn stderr_is_terminal() -> bool {
        false
    }
}

pub use imp::{catch_interrupts, stderr_is_terminal};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_escapes_controls_only() {
        assert!(matches!(clean("PATH=/usr/bin"), Cow::Borrowed(_)));
        assert_eq!(clean("A=1\nB=2"), "A=1\\nB=2");
        assert_eq!(clean("\x1b[2J\r\0x\t"), "\\x1b[2J\\r\\0x\\t");
        assert_eq!(clean("\u{9b}31m \u{7f}"), "\\x9b31m \\x7f");
        assert_eq!(clean("a\u{202e}b"), "a\\u{202e}b");
        assert_eq!(clean("C:\\Users é"), "C:\\Users é");
    }
}
