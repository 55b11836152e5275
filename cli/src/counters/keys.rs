//! What `counters monitor` needs of its terminal, as dotnet-counters uses it: its width
//! (rows are fitted, never wrapped) and single keys (`p` pause, `r` resume, `q` quit) read
//! without waiting for Enter.

/// The terminal's columns and rows (80x24 when it does not say).
#[cfg(unix)]
pub fn size() -> (usize, usize) {
    // SAFETY: TIOCGWINSZ fills the winsize it is given; nothing else is touched.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0;
    let cols = if ok && ws.ws_col >= 20 {
        usize::from(ws.ws_col)
    } else {
        80
    };
    let rows = if ok && ws.ws_row >= 5 {
        usize::from(ws.ws_row)
    } else {
        24
    };
    (cols, rows)
}

/// The terminal's columns and rows (80x24 when it does not say).
#[cfg(not(unix))]
pub fn size() -> (usize, usize) {
    (80, 24)
}

/// Standard input switched to single keys without echo while this lives (restored when
/// dropped, on every way out); `None` when standard input is no terminal.
#[cfg(unix)]
pub struct Keys {
    saved: libc::termios,
}

#[cfg(unix)]
impl Keys {
    /// Single keys from standard input, if it is a terminal.
    pub fn open() -> Option<Keys> {
        // SAFETY: isatty and tcgetattr on descriptor 0 only read; the termios is ours.
        unsafe {
            if libc::isatty(0) != 1 {
                return None;
            }
            let mut saved: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut saved) != 0 {
                return None;
            }
            let mut raw = saved;
            raw.c_lflag &= !(libc::ICANON | libc::ECHO);
            // A read returns at once with what is there, possibly nothing.
            raw.c_cc[libc::VMIN] = 0;
            raw.c_cc[libc::VTIME] = 0;
            if libc::tcsetattr(0, libc::TCSANOW, &raw) != 0 {
                return None;
            }
            Some(Keys { saved })
        }
    }

    /// The next key pressed, if any (never waits).
    pub fn poll(&mut self) -> Option<u8> {
        let mut b = 0u8;
        // SAFETY: reads at most one byte into `b`.
        let n = unsafe { libc::read(0, (&mut b as *mut u8).cast(), 1) };
        if n == 1 {
            Some(b)
        } else {
            None
        }
    }
}

#[cfg(unix)]
impl Drop for Keys {
    fn drop(&mut self) {
        // SAFETY: restores the settings read in `open`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
        }
    }
}

/// No single keys here (the console's own modes are left alone).
#[cfg(not(unix))]
pub struct Keys;

#[cfg(not(unix))]
impl Keys {
    /// Never: single keys need a Unix terminal here.
    pub fn open() -> Option<Keys> {
        None
    }

    /// Nothing.
    pub fn poll(&mut self) -> Option<u8> {
        None
    }
}
