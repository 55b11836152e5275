//! Descriptors: serve raises its soft `RLIMIT_NOFILE` to the hard limit, and keeps the
//! listen-mode pool's runtimes well under it, so that runtimes (or anything else on the
//! diagnostic port) can never take the descriptors the API needs to answer.

use crate::http;

/// Descriptors serve needs besides its HTTP connections and the pool: stdio, tokio's
/// epoll, eventfd and signal pipe, the listeners, the blocking pool's files (16 threads at
/// most), a dump or gcdump being sent, discovery's `/proc` reads and socket probes, and the
/// runtime connections of running operations (traces, stacks, logs, live metrics, dumps,
/// `/metrics`' sessions: a few dozen by their semaphores).
const BASE: u64 = 128;

/// The soft descriptor limit, raised to the hard one where it was lower (`None` where
/// there is no such limit). Says on stderr when it cannot be raised.
pub fn raise_nofile() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit on a local struct.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let want = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            // SAFETY: as above.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
                lim.rlim_cur = lim.rlim_max;
            } else {
                eprintln!(
                    "dsipc: serve: cannot raise the descriptor limit from {} to {}: {}",
                    lim.rlim_cur,
                    lim.rlim_max,
                    std::io::Error::last_os_error()
                );
            }
        }
        if lim.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        // rlim_t is u64 on Linux, narrower on some other Unix targets.
        #[allow(clippy::unnecessary_cast)]
        Some(lim.rlim_cur as u64)
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// The most runtimes the listen-mode pool keeps under a descriptor limit of `limit`, with
/// `listeners` HTTP listeners: what is left after the API's reserve (each listener's
/// connections and refusals, the pool's pending Advertise reads, [`BASE`]), halved, since
/// a runtime running a command holds two connections (the command's and its next idle
/// one). At least 1; at most the pool's own default.
pub fn pool_bound(limit: Option<u64>, listeners: usize) -> usize {
    let most = dsipc_tokio::reverse::MAX_POOLED_RUNTIMES;
    let limit = match limit {
        Some(l) => l,
        None => return most,
    };
    let reserve = BASE
        + listeners as u64 * (http::MAX_CONNECTIONS + http::MAX_REFUSING) as u64
        + dsipc_tokio::reverse::MAX_PENDING_ADVERTISES as u64;
    let left = limit.saturating_sub(reserve) / 2;
    (left.min(most as u64) as usize).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_bound_keeps_the_api_reserve_under_the_descriptor_limit() {
        // Two listeners: 128 + 2 * (64 + 16) + 64 = 352 reserved.
        assert_eq!(pool_bound(Some(1024), 2), 336);
        assert_eq!(pool_bound(Some(4096), 2), 1024);
        assert_eq!(pool_bound(Some(100), 2), 1);
        assert_eq!(pool_bound(None, 2), 1024);
        for limit in [512u64, 1024, 2048, 3000] {
            let n = pool_bound(Some(limit), 2) as u64;
            assert!(2 * n + 352 <= limit, "{} runtimes under {}", n, limit);
        }
    }
}
