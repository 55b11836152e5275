//! The descriptor limit, for tests and the benchmark that open thousands of connections
//! (the benchmark includes this file with `#[path]`).

/// Raises the soft descriptor limit to at least `want` (up to the hard limit).
pub fn raise_fd_limit(want: u64) -> u64 {
    // SAFETY: plain getrlimit/setrlimit on a local struct.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        lim.rlim_cur
    }
}
