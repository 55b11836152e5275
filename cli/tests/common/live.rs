//! [`Live`]: a long-running child whose output tests synchronise on, line by line.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use super::{bin, wait_bounded, Run};

/// A long-running child (`dsipc`, or `script` running it) whose stdout (as it comes, for
/// pseudo-terminal output too) and stderr lines arrive on channels, so tests synchronise
/// on what it prints; killed when dropped.
pub struct Live {
    /// The child.
    pub child: Child,
    what: String,
    started: Instant,
    out: Receiver<Vec<u8>>,
    err: Receiver<String>,
    stdout: Vec<u8>,
    /// Bytes of `stdout` already handed out by [`Live::line`].
    taken: usize,
    stderr: Vec<String>,
}

/// Sends what `read` yields (lines when `lines`, else chunks) on a channel, until EOF.
fn forward<R: Read + Send + 'static, T: Send + 'static>(
    read: R,
    wrap: fn(Vec<u8>) -> T,
    lines: bool,
) -> Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(read);
        loop {
            let mut v = Vec::new();
            let n = if lines {
                r.read_until(b'\n', &mut v)
            } else {
                r.fill_buf().map(|b| {
                    v.extend_from_slice(b);
                    b.len()
                })
            };
            match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if !lines {
                        r.consume(n);
                    } else if v.last() == Some(&b'\n') {
                        v.pop();
                    }
                    if tx.send(wrap(v)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

impl Live {
    /// `dsipc ARGS`.
    pub fn dsipc(args: &[&str]) -> Live {
        let mut cmd = Command::new(bin());
        cmd.args(args);
        Live::spawn(cmd)
    }

    /// Any command, stdin null, stdout and stderr piped.
    pub fn spawn(mut cmd: Command) -> Live {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {:?}: {}", cmd, e));
        let what = format!("{:?}", cmd);
        let out = forward(child.stdout.take().unwrap(), |v| v, false);
        let err = forward(
            child.stderr.take().unwrap(),
            |v| String::from_utf8_lossy(&v).into_owned(),
            true,
        );
        Live {
            child,
            what,
            started: Instant::now(),
            out,
            err,
            stdout: Vec::new(),
            taken: 0,
            stderr: Vec::new(),
        }
    }

    /// Waits (bounded) for more stdout; false once stdout is closed.
    fn more(&mut self, deadline: Instant, what: &str) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.out.recv_timeout(left) {
            Ok(c) => {
                self.stdout.extend_from_slice(&c);
                true
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => false,
            Err(e) => panic!(
                "no {} ({:?}); stdout so far:\n{}\nstderr so far:\n{}",
                what,
                e,
                String::from_utf8_lossy(&self.stdout),
                self.stderr.join("\n")
            ),
        }
    }

    /// Waits (bounded) until stdout so far contains `needle`; returns stdout so far.
    pub fn wait_stdout(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = String::from_utf8_lossy(&self.stdout).into_owned();
            if text.contains(needle) {
                return text;
            }
            let what = format!("{:?} within {:?}", needle, limit);
            assert!(self.more(deadline, &what), "stdout closed: no {}", what);
        }
    }

    /// The next stdout line (bounded wait).
    pub fn line(&mut self, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(i) = self.stdout[self.taken..].iter().position(|&b| b == b'\n') {
                let l = &self.stdout[self.taken..self.taken + i];
                let l = String::from_utf8_lossy(l).into_owned();
                self.taken += i + 1;
                eprintln!("stdout: {}", l);
                return l;
            }
            let what = format!("stdout line within {:?}", limit);
            assert!(self.more(deadline, &what), "stdout closed: no {}", what);
        }
    }

    /// The stderr lines read so far (by [`Live::stderr_line`]).
    pub fn stderr_lines(&self) -> &[String] {
        &self.stderr
    }

    /// Waits (bounded) for a stderr line containing `needle`; returns it.
    pub fn stderr_line(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.err.recv_timeout(left) {
                Ok(l) => {
                    eprintln!("stderr: {}", l);
                    self.stderr.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "no stderr line with {:?} within {:?} ({:?}); got {:?}",
                    needle, limit, e, self.stderr
                ),
            }
        }
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child, not reaped yet.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }

    /// Waits (bounded by `limit`: past it the test fails) for the exit; all of stdout and
    /// stderr.
    pub fn wait(&mut self, limit: Duration) -> Run {
        let (status, hwm_kib) = wait_bounded(&mut self.child, &self.what, limit);
        while let Ok(c) = self.out.recv_timeout(Duration::from_secs(5)) {
            self.stdout.extend_from_slice(&c);
        }
        while let Ok(l) = self.err.recv_timeout(Duration::from_secs(5)) {
            self.stderr.push(l);
        }
        let run = Run {
            what: self.what.clone(),
            code: status.code(),
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stdout_bytes: std::mem::take(&mut self.stdout),
            stderr: self.stderr.join("\n"),
            took: self.started.elapsed(),
            hwm_kib,
        };
        eprintln!(
            "exit {:?}\n{}\n{}",
            run.code,
            &run.stdout.chars().take(4000).collect::<String>(),
            run.stderr
        );
        run
    }

    /// Ctrl-C, then [`Live::wait`].
    pub fn interrupt(&mut self, limit: Duration) -> Run {
        self.signal(libc::SIGINT);
        self.wait(limit)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
