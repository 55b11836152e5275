//! `dsipc serve`'s discovery facing sockets named as runtimes' that accept and never answer
//! (anyone can create them in the temp folder): listings stay bounded, probe a bounded
//! number at a time, and do not ask a silent socket again on the next listing.
#![cfg(target_os = "linux")]

mod common;

use std::io::ErrorKind;
use std::os::unix::net::UnixListener;
use std::process::{Child, Command};

use common::serve::{fake, Serve, START};
use dsipc_testkit::{Config, TempDir};

/// serve's `MAX_PROBES`: probes at once, over every listing.
const MAX_PROBES: usize = 32;
/// Silent sockets: more than there are turns.
const SILENT: usize = 48;

/// A socket named as the runtime of a live process of ours: it accepts (the kernel
/// queues the connection) and never answers.
struct Silent {
    child: Child,
    listener: UnixListener,
}

impl Silent {
    fn new(dir: &TempDir) -> Silent {
        let child = Command::new("sleep").arg("600").spawn().unwrap();
        let pid = child.id();
        let key = dsipc_std::unix::start_key(pid).expect("start key");
        let path = dir
            .path()
            .join(format!("dotnet-diagnostic-{}-{}-socket", pid, key));
        let listener = UnixListener::bind(path).unwrap();
        listener.set_nonblocking(true).unwrap();
        Silent { child, listener }
    }

    /// The connections made to it since the last call.
    fn connections(&self) -> usize {
        let mut n = 0;
        loop {
            match self.listener.accept() {
                Ok(_) => n += 1,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return n,
                Err(e) => panic!("accept: {}", e),
            }
        }
    }
}

impl Drop for Silent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// 48 silent sockets beside a runtime that answers: every listing answers within its bound
/// (a turn's wait and a probe's timeout, 4 s: curl gives it 10), listing the runtime that
/// answers; no more than 32 sockets are probed at once, the ones that got no turn are
/// skipped and said on stderr, the next listing probes those, and a socket that did not
/// answer is not asked again: the third listing connects to none. `/info` answers.
#[test]
fn serve_discovery_probes_are_bounded_and_silent_sockets_are_not_asked_again() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let _rt = fake(&dir, Config::new());
    let silent: Vec<Silent> = (0..SILENT).map(|_| Silent::new(&dir)).collect();
    // No /metrics collection: its discovery would list (and probe) beside the requests'.
    let mut serve = Serve::start(dir.path(), &["--temp-apikey", "--no-metrics"]);
    let me = std::process::id();

    let list = |serve: &Serve| {
        let p = serve.get_with("/processes", &["--max-time", "10"]);
        assert_eq!(p.status, 200, "{}", p.text());
        let pids: Vec<u64> = p
            .json()
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(pids, [u64::from(me)]);
        silent
            .iter()
            .map(Silent::connections)
            .collect::<Vec<usize>>()
    };

    // First listing: a turn for 32 of them; the others waited and were skipped.
    let first = list(&serve);
    let probed: usize = first.iter().sum();
    assert!(
        probed <= MAX_PROBES && probed > 0,
        "{} silent sockets probed at once",
        probed
    );
    if probed < SILENT {
        serve.live.stderr_line("not listed this time", START);
    }
    // Second: only the ones not probed yet.
    let second = list(&serve);
    for (a, b) in first.iter().zip(&second) {
        assert!(*a + *b <= 1, "a silent socket probed again: {:?}", (a, b));
    }
    assert_eq!(second.iter().sum::<usize>(), SILENT - probed);
    // Third: every one of them was silent not long ago.
    assert_eq!(list(&serve).iter().sum::<usize>(), 0);
    assert_eq!(serve.get("/info").status, 200);
}
