//! Terminal and signal helpers: is stderr a terminal, Ctrl-C as a counter, and text made
//! safe for a terminal.

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

/// Text a runtime or a file name supplies, with control characters escaped (the trace
/// layer's rule, shared with serve and the recipes).
pub use dsipc_trace::format::clean;

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
