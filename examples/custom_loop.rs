//! The session layer driven by a plain single-threaded `poll(2)` loop, no async runtime:
//! the mission's first user, who has an event loop of their own.
//!
//! ```text
//! cargo run --example custom_loop -- PID
//! ```
//! prints the runtime's ProcessInfo, traces Microsoft-DotNETCore-SampleProfiler for 2
//! seconds, stops the session from a second connection, and prints the bytes and events
//! received. Every policy (command versions, the stop, deadlines, how the stream ended) is
//! `dsipc::session`'s; this file only finds the socket, moves bytes and waits.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Instant;

use dsipc::nettrace::{Item, NettraceParser, Status};
use dsipc::payload::Provider;
use dsipc::session::{Ask, Call, ProcessInfo, SessionError, Step, TraceConfig, TraceStep, Tracing};
use dsipc::transport::{SocketName, NAME_PREFIX};
use dsipc::ClientEvent;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let pid: u32 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .ok_or("usage: custom_loop PID")?;
    let socket = find_socket(pid)?;
    let epoch = Instant::now();
    let now = || epoch.elapsed().as_millis() as u64;

    // 1. ProcessInfo (3, then 2, then 1): Core 3.1 knows none of them.
    match run_call(Call::new(Ask::ProcessInfo, now(), 5_000)?, &socket, &now) {
        Ok(Some(info)) => println!(
            "{} (pid {}): {} {} {}, {}",
            info.command,
            info.pid,
            info.os,
            info.arch,
            info.clr_version.as_deref().unwrap_or("?"),
            info.command_line
        ),
        Ok(None) => return Err("no ProcessInfo reply".into()),
        Err(SessionError::NotSupported { .. }) => {
            println!("this runtime has no ProcessInfo (.NET Core 3.x); tracing anyway")
        }
        Err(e) => return Err(e.into()),
    }

    // 2. A 2-second SampleProfiler session, stopped from a second connection.
    let providers = [Provider::new("Microsoft-DotNETCore-SampleProfiler", 0, 5)];
    let mut tracing = Tracing::new(TraceConfig::new(&providers), now(), 5_000)?;
    let mut stream: Option<UnixStream> = None;
    let mut stop: Option<(Call, Option<UnixStream>)> = None;
    let mut stop_at = None;
    let mut parser = NettraceParser::new();
    let mut pending: Vec<u8> = Vec::new();
    let (mut bytes, mut events) = (0u64, 0u64);
    let outcome = loop {
        // The stop connection, driven in the same loop.
        if let Some((call, conn)) = stop.as_mut() {
            match call.poll(now()) {
                Ok(Step::Connect) => match connect(&socket) {
                    Ok(c) => {
                        *conn = Some(c);
                        call.connected()?;
                    }
                    // The stop's connection refused: the session ends with that error.
                    Err(_) => {
                        tracing.stop_failed(SessionError::Transport {
                            command: call.command(),
                            what: "the stop's connection was refused",
                        });
                        stop = None;
                    }
                },
                Ok(Step::Transmit(b)) => {
                    write_all(conn.as_mut().ok_or("no stop connection")?, b)?;
                    call.transmitted()?;
                }
                Ok(Step::Receive) => {
                    let sock = conn.as_mut().ok_or("no stop connection")?;
                    match sock.read(call.read_buf()?) {
                        Ok(0) => call.eof(),
                        Ok(n) => call.filled(n),
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(Step::Done) => {
                    tracing.stop_answered(now());
                    stop = None;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing.stop_failed(e);
                    stop = None;
                }
            }
        }
        match tracing.poll(now())? {
            TraceStep::Connect => {
                stream = Some(connect(&socket)?);
                tracing.connected()?;
            }
            TraceStep::Transmit(b) => {
                write_all(stream.as_mut().ok_or("no connection")?, b)?;
                tracing.transmitted()?;
            }
            TraceStep::Close => stream = None,
            TraceStep::Started { session_id } => {
                println!("{}: session {session_id:#x} started", tracing.command());
                stop_at = Some(now() + 2_000);
            }
            TraceStep::Data(d) => {
                bytes += d.len() as u64;
                events += count_events(&mut parser, &mut pending, d)?;
            }
            TraceStep::End(outcome) => break outcome,
            TraceStep::Receive => {
                if stop.is_none()
                    && !tracing.is_stop_requested()
                    && stop_at.map_or(false, |t| now() >= t)
                {
                    stop = Some((tracing.request_stop(now())?, None));
                    continue;
                }
                // Wait for either connection, at most until the nearest deadline.
                let deadline = [
                    tracing.poll_timeout(),
                    stop.as_ref().and_then(|s| s.0.poll_timeout()),
                    stop_at,
                ]
                .iter()
                .flatten()
                .min()
                .copied();
                let sock = stream.as_mut().ok_or("no connection")?;
                let stop_sock = stop.as_ref().and_then(|s| s.1.as_ref());
                wait(sock, stop_sock, deadline.map(|d| d.saturating_sub(now())))?;
                match sock.read(tracing.read_buf()?) {
                    Ok(0) => tracing.eof(),
                    Ok(n) => tracing.filled(n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e.into()),
                }
            }
            _ => {}
        }
    };
    println!("{outcome:?}: {bytes} bytes, {events} events");
    Ok(())
}

/// Runs a one-shot call to its end (blocking is fine: one connection at a time).
fn run_call(
    mut call: Call,
    socket: &PathBuf,
    now: &dyn Fn() -> u64,
) -> Result<Option<ProcessInfo>, SessionError> {
    let mut conn: Option<UnixStream> = None;
    let mut info = None;
    let command = call.command();
    let io = |_e: std::io::Error| SessionError::Transport {
        command,
        what: "the connection failed",
    };
    loop {
        let command = call.command();
        match call.poll(now())? {
            Step::Connect => {
                conn = Some(connect(socket).map_err(|_| SessionError::Transport {
                    command,
                    what: "cannot connect",
                })?);
                call.connected()?;
            }
            Step::Transmit(b) => {
                write_all(conn.as_mut().expect("connected"), b).map_err(io)?;
                call.transmitted()?;
            }
            Step::Receive => {
                let sock = conn.as_mut().expect("connected");
                let left = call.poll_timeout().unwrap_or(0).saturating_sub(now());
                wait(sock, None, Some(left)).map_err(io)?;
                match sock.read(call.read_buf()?) {
                    Ok(0) => call.eof(),
                    Ok(n) => call.filled(n),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(e) => return Err(io(e)),
                }
            }
            Step::Event(ClientEvent::Reply(r)) => info = ProcessInfo::from_reply(command, &r),
            Step::Close => conn = None,
            Step::Done => return Ok(info),
            _ => {}
        }
    }
}

/// Counts the events of the stream as it arrives (the core's parser over the bytes
/// not yet consumed).
fn count_events(
    parser: &mut NettraceParser,
    pending: &mut Vec<u8>,
    data: &[u8],
) -> Result<u64, Error> {
    pending.extend_from_slice(data);
    let (mut at, mut n) = (0, 0);
    loop {
        let handled = parser.handle_input(&pending[at..])?;
        at += handled.consumed;
        match handled.status {
            Status::Event(Item::Event(_)) => n += 1,
            Status::Event(_) => {}
            Status::Partial { .. } | Status::Done => break,
        }
    }
    pending.drain(..at);
    Ok(n)
}

/// `poll(2)` on one or two sockets, for at most `ms` milliseconds (`None`: no bound).
fn wait(a: &UnixStream, b: Option<&UnixStream>, ms: Option<u64>) -> std::io::Result<()> {
    let mut fds = vec![libc::pollfd {
        fd: a.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    if let Some(b) = b {
        fds.push(libc::pollfd {
            fd: b.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
    }
    let timeout = ms.map_or(-1, |ms| ms.min(i32::MAX as u64) as i32);
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures for the whole call.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() != ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(())
}

fn connect(path: &PathBuf) -> std::io::Result<UnixStream> {
    let s = UnixStream::connect(path)?;
    s.set_nonblocking(true)?;
    Ok(s)
}

/// The whole request in one write (a non-blocking socket takes a few hundred bytes at once).
fn write_all(s: &mut UnixStream, mut b: &[u8]) -> std::io::Result<()> {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => wait(s, None, Some(10))?,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket` (or `/tmp`).
fn find_socket(pid: u32) -> Result<PathBuf, Error> {
    let dir = std::env::var_os("TMPDIR").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    for entry in std::fs::read_dir(&dir)? {
        let name = entry?.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(NAME_PREFIX) {
            continue;
        }
        if let Some(s) = SocketName::parse(&name) {
            if s.pid == pid {
                return Ok(dir.join(&*name));
            }
        }
    }
    Err(format!("no diagnostic socket for pid {pid} in {}", dir.display()).into())
}
