//! Terminal and signal helpers: is stderr a terminal, and Ctrl-C as a flag.

use std::sync::atomic::{AtomicBool, Ordering};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// True once Ctrl-C (SIGINT) or SIGTERM arrived after [`catch_interrupts`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[cfg(unix)]
mod imp {
    use super::*;

    // `c_int` is `i32` on every Unix Rust supports.
    extern "C" fn on_signal(_: i32) {
        // A second Ctrl-C while stopping: leave at once (only async-signal-safe calls).
        if INTERRUPTED.swap(true, Ordering::SeqCst) {
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
