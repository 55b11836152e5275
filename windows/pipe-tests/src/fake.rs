//! A fake .NET runtime over real named pipes, built on the core's `ServerConnection` and
//! dsipc-std's overlapped pipes ([`PipeListener`], [`PipeStream`]).
//!
//! - Listening ([`FakeRuntime::listen`]): the runtime's default pipe; every connection is
//!   served on its own thread (so StopTracing can arrive while a stream runs).
//! - Reverse ([`FakeRuntime::reverse`]): connects to a monitor's pipe, sends the Advertise,
//!   serves one command, closes and reconnects, as a runtime started with
//!   `DOTNET_DiagnosticPorts=NAME,connect` does.
//!
//! Every command gets the reply a .NET 8 runtime would give, unless [`Answer`] says
//! otherwise for that command. EventPipe sessions stream a fixed number of bytes (a known
//! pattern: byte `i` is `i % 251`) or stream until StopTracing arrives for them on another
//! connection; StopTracing replies only once that stream has ended, like the runtime.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use dsipc::conn::{
    encode_environment_block, environment_block_len, ServerConnection, ServerEvent, ServerStatus,
};
use dsipc::payload::{
    ErrorReply, ProcessEnvironmentReply, ProcessInfo2Reply, ProcessInfo3Reply, ProcessInfoReply,
    Reply, Response,
};
use dsipc::wire::{Advertise, Command, Guid, Hresult, Text, HEADER_LEN};
use dsipc::{AnyRequest, Request};
use dsipc_std::windows::{connect, endpoint_for_pid, PipeListener, PipeStream};
use dsipc_std::Connection;

/// How often blocked threads look at the stop flag.
const TICK: Duration = Duration::from_millis(50);
/// Bound on any single write (a client that stopped reading).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Chunk size of streamed continuations.
const CHUNK: usize = 64 * 1024;

/// The byte at offset `i` of every streamed continuation.
pub fn pattern_byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// `len` bytes of the streamed pattern from offset `offset` (built with copies, so that it
/// is fast in unoptimized builds too).
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    let cycle: Vec<u8> = (0..251u8).collect();
    let mut v = Vec::with_capacity(len + 251);
    v.extend_from_slice(&cycle[(offset % 251) as usize..]);
    while v.len() < len {
        v.extend_from_slice(&cycle);
    }
    v.truncate(len);
    v
}

/// True if `data` is the pattern from `offset`.
pub fn is_pattern(offset: u64, data: &[u8]) -> bool {
    data == &pattern(offset, data.len())[..]
}

/// What the fake does with one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// The normal OK reply (and continuation).
    Ok,
    /// An error reply with this HRESULT.
    Error(Hresult),
    /// An error reply with an HRESULT and a message (as GenerateCoreDump3 sends).
    ErrorWithMessage(Hresult, String),
    /// The first `bytes` bytes of the normal reply (continuation included), then the
    /// connection is closed: a runtime that dies mid-reply.
    Vanish {
        /// Bytes written before closing.
        bytes: usize,
    },
    /// No answer at all; the connection stays open until the client closes it.
    Hang,
}

/// How the fake presents itself and answers.
#[derive(Debug, Clone)]
pub struct Config {
    /// The pid it reports (and advertises).
    pub pid: u64,
    /// Its cookie.
    pub cookie: Guid,
    /// Its command line.
    pub command_line: String,
    /// Its environment, `NAME=VALUE` entries.
    pub environment: Vec<String>,
    /// Bytes streamed after a CollectTracing reply; `None`: until StopTracing.
    pub stream_len: Option<u64>,
    /// Per-command answers (the rest get [`Answer::Ok`]).
    pub answers: HashMap<Command, Answer>,
}

impl Config {
    /// pid 4242, a fixed cookie, `C:\app\App.exe --serve`, a small environment, streams
    /// of 1 MiB.
    pub fn new() -> Config {
        Config {
            pid: 4242,
            cookie: Guid::from_fields(0x0123_4567, 0x89ab, 0xcdef, [1, 2, 3, 4, 5, 6, 7, 8]),
            command_line: r"C:\app\App.exe --serve".to_string(),
            environment: vec![
                "PATH=C:\\Windows".to_string(),
                "DOTNET_gcServer=1".to_string(),
            ],
            stream_len: Some(1024 * 1024),
            answers: HashMap::new(),
        }
    }

    /// Sets the answer to `command`.
    pub fn answer(mut self, command: Command, answer: Answer) -> Config {
        self.answers.insert(command, answer);
        self
    }

    /// The Advertise this runtime sends on a reverse port.
    pub fn advertise(&self) -> Advertise {
        Advertise {
            runtime_cookie: self.cookie,
            process_id: self.pid,
            future: 0,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::new()
    }
}

/// A request the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Its command.
    pub command: Command,
    /// Its payload bytes.
    pub payload: Vec<u8>,
}

impl Received {
    /// The decoded request.
    pub fn request(&self) -> AnyRequest<'_> {
        AnyRequest::decode(self.command, &self.payload)
            .expect("recorded requests decode")
            .expect("recorded requests are known commands")
    }
}

struct Session {
    stop: AtomicBool,
    done: Mutex<bool>,
    done_cv: Condvar,
}

struct Shared {
    config: Mutex<Config>,
    stop: AtomicBool,
    received: Mutex<Vec<Received>>,
    rejected: AtomicUsize,
    advertised: AtomicUsize,
    resumed: AtomicBool,
    next_session: AtomicU64,
    sessions: Mutex<HashMap<u64, Arc<Session>>>,
    streamed: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fake runtime; stopped (its pipe gone, its threads ended) on drop.
pub struct FakeRuntime {
    shared: Arc<Shared>,
    path: PathBuf,
    thread: Option<JoinHandle<()>>,
}

impl FakeRuntime {
    fn shared(config: Config) -> Arc<Shared> {
        Arc::new(Shared {
            config: Mutex::new(config),
            stop: AtomicBool::new(false),
            received: Mutex::new(Vec::new()),
            rejected: AtomicUsize::new(0),
            advertised: AtomicUsize::new(0),
            resumed: AtomicBool::new(false),
            next_session: AtomicU64::new(0x0000_7f00_0000_1000),
            sessions: Mutex::new(HashMap::new()),
            streamed: AtomicU64::new(0),
        })
    }

    /// Serves the pipe at `path` (`\\.\pipe\NAME`); clients can connect when this returns.
    pub fn listen(path: &Path, config: Config) -> io::Result<FakeRuntime> {
        let mut listener = PipeListener::bind(path)?;
        let shared = FakeRuntime::shared(config);
        let s = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name("fake-accept".into())
            .spawn(move || {
                while !s.stop.load(Ordering::SeqCst) {
                    match listener.accept_timeout(TICK) {
                        Ok(Some(stream)) => {
                            let s = Arc::clone(&s);
                            let _ = thread::Builder::new()
                                .name("fake-serve".into())
                                .spawn(move || serve(&s, stream, ServerConnection::new()));
                        }
                        Ok(None) => {}
                        Err(_) => thread::sleep(TICK),
                    }
                }
            })?;
        Ok(FakeRuntime {
            shared,
            path: path.to_path_buf(),
            thread: Some(thread),
        })
    }

    /// Serves `\\.\pipe\dotnet-diagnostic-{pid}`, the default pipe of process `pid`.
    pub fn listen_as_pid(pid: u32, config: Config) -> io::Result<FakeRuntime> {
        FakeRuntime::listen(endpoint_for_pid(pid).path(), config)
    }

    /// Connects to the reverse port `path` `connections` times (`None`: until dropped),
    /// one command per connection, reconnecting after each (retrying while the pipe does
    /// not exist or is busy).
    pub fn reverse(path: &Path, config: Config, connections: Option<usize>) -> FakeRuntime {
        let shared = FakeRuntime::shared(config);
        let s = Arc::clone(&shared);
        let port = path.to_path_buf();
        let thread = thread::Builder::new()
            .name("fake-reverse".into())
            .spawn(move || {
                let mut made = 0usize;
                while !s.stop.load(Ordering::SeqCst) && connections.map_or(true, |c| made < c) {
                    let stream = match connect(&port, Duration::from_millis(200)) {
                        Ok(st) => st,
                        Err(_) => {
                            thread::sleep(Duration::from_millis(10));
                            continue;
                        }
                    };
                    made += 1;
                    let adv = lock(&s.config).advertise();
                    s.advertised.fetch_add(1, Ordering::SeqCst);
                    serve(&s, stream, ServerConnection::advertising(adv));
                }
            })
            .expect("spawn the reverse runtime");
        FakeRuntime {
            shared,
            path: path.to_path_buf(),
            thread: Some(thread),
        }
    }

    /// The pipe it serves or connects to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Changes the answer to `command`.
    pub fn set_answer(&self, command: Command, answer: Answer) {
        lock(&self.shared.config).answers.insert(command, answer);
    }

    /// Changes the length of the next streams (`None`: until StopTracing).
    pub fn set_stream_len(&self, len: Option<u64>) {
        lock(&self.shared.config).stream_len = len;
    }

    /// The requests received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        lock(&self.shared.received).clone()
    }

    /// Waits (bounded) until `count` requests arrived; returns them.
    pub fn wait_received(&self, count: usize, timeout: Duration) -> Vec<Received> {
        let deadline = Instant::now() + timeout;
        loop {
            let r = self.received();
            if r.len() >= count || Instant::now() > deadline {
                return r;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Requests rejected by the server machine.
    pub fn rejected(&self) -> usize {
        self.shared.rejected.load(Ordering::SeqCst)
    }

    /// Reverse connections made (each with an Advertise).
    pub fn advertised(&self) -> usize {
        self.shared.advertised.load(Ordering::SeqCst)
    }

    /// True once a ResumeRuntime was answered.
    pub fn is_resumed(&self) -> bool {
        self.shared.resumed.load(Ordering::SeqCst)
    }

    /// Continuation bytes streamed so far (all sessions).
    pub fn streamed(&self) -> u64 {
        self.shared.streamed.load(Ordering::SeqCst)
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for s in lock(&self.shared.sessions).values() {
            s.stop.store(true, Ordering::SeqCst);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Why a connection ended early.
enum End {
    /// The answer said to vanish, and it did.
    Vanished,
    /// The client went away, or the fake is stopping.
    Gone,
}

/// The writing side of one connection, with the byte budget of [`Answer::Vanish`].
struct Out<'a> {
    stream: &'a mut PipeStream,
    budget: Option<usize>,
}

impl Out<'_> {
    fn send(&mut self, data: &[u8]) -> Result<(), End> {
        if let Some(left) = self.budget.as_mut() {
            if data.len() >= *left {
                let n = *left;
                let _ = self.stream.write_all(&data[..n]);
                return Err(End::Vanished);
            }
            *left -= data.len();
        }
        self.stream.write_all(data).map_err(|_| End::Gone)
    }
}

/// Serves one connection: (Advertise,) one request, the answer, close.
fn serve(shared: &Shared, mut stream: PipeStream, mut machine: ServerConnection) {
    if stream.set_write_timeout(Some(WRITE_TIMEOUT)).is_err()
        || stream.set_read_timeout(Some(TICK)).is_err()
    {
        return;
    }
    let mut out = vec![0u8; 64 * 1024];
    match machine.poll_transmit(&mut out) {
        Ok(0) => {}
        Ok(n) => {
            if stream.write_all(&out[..n]).is_err() {
                return;
            }
        }
        Err(_) => return,
    }
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        let h = machine.handle_input(&buf);
        match h.status {
            ServerStatus::Event(ServerEvent::Request { request, .. }) => {
                let command = request.command();
                lock(&shared.received).push(Received {
                    command,
                    payload: buf[HEADER_LEN..h.consumed].to_vec(),
                });
                let vanished = answer(shared, &mut stream, &mut machine, &request, &mut out);
                if !vanished {
                    // As the runtime does before closing: let the client read it all.
                    let _ = stream.wait_until_read();
                }
                return;
            }
            ServerStatus::Event(ServerEvent::Rejected(_)) => {
                shared.rejected.fetch_add(1, Ordering::SeqCst);
                if let Ok(n) = machine.poll_transmit(&mut out) {
                    if stream.write_all(&out[..n]).is_ok() {
                        let _ = stream.wait_until_read();
                    }
                }
                return;
            }
            ServerStatus::Event(_) | ServerStatus::Done => return,
            ServerStatus::Partial { .. } => {}
        }
        loop {
            if shared.stop.load(Ordering::SeqCst) {
                return;
            }
            match stream.read(&mut chunk) {
                Ok(0) => {
                    if let Some(ServerEvent::Rejected(_)) = machine.handle_eof() {
                        shared.rejected.fetch_add(1, Ordering::SeqCst);
                    }
                    return;
                }
                Ok(n) => {
                    buf.extend_from_slice(&chunk[..n]);
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
                Err(_) => return,
            }
        }
    }
}

/// Answers `request`; returns true if the connection vanished on purpose.
fn answer(
    shared: &Shared,
    stream: &mut PipeStream,
    machine: &mut ServerConnection,
    request: &AnyRequest<'_>,
    buf: &mut [u8],
) -> bool {
    let command = request.command();
    let config = lock(&shared.config).clone();
    let how = config.answers.get(&command).cloned().unwrap_or(Answer::Ok);
    let mut out = Out {
        stream,
        budget: match how {
            Answer::Vanish { bytes } => Some(bytes),
            _ => None,
        },
    };
    let result = match how {
        Answer::Hang => {
            hang(shared, out.stream);
            Ok(())
        }
        Answer::Error(h) => respond(machine, &mut out, buf, &Response::Error(ErrorReply::new(h))),
        Answer::ErrorWithMessage(h, msg) => respond(
            machine,
            &mut out,
            buf,
            &Response::Error(ErrorReply {
                hresult: h,
                message: Some(Text::Str(&msg)),
            }),
        ),
        Answer::Ok | Answer::Vanish { .. } => ok(shared, &config, machine, &mut out, request, buf),
    };
    matches!(result, Err(End::Vanished))
}

fn respond(
    machine: &mut ServerConnection,
    out: &mut Out<'_>,
    buf: &mut [u8],
    response: &Response<'_>,
) -> Result<(), End> {
    let n = machine
        .send_response(response, buf)
        .expect("the fake's responses encode");
    out.send(&buf[..n])
}

fn hang(shared: &Shared, stream: &mut PipeStream) {
    let mut b = [0u8; 256];
    let deadline = Instant::now() + Duration::from_secs(60);
    while !shared.stop.load(Ordering::SeqCst) && Instant::now() < deadline {
        match stream.read(&mut b) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {}
            Err(_) => return,
        }
    }
}

fn ok(
    shared: &Shared,
    config: &Config,
    machine: &mut ServerConnection,
    out: &mut Out<'_>,
    request: &AnyRequest<'_>,
    buf: &mut [u8],
) -> Result<(), End> {
    let cl = Text::Str(&config.command_line);
    let (os, arch) = (Text::Str("Windows"), Text::Str("x64"));
    let (entry, version) = (Text::Str("App"), Text::Str("8.0.4"));
    match request {
        AnyRequest::ProcessInfo(_) => respond(
            machine,
            out,
            buf,
            &Response::Ok(Reply::ProcessInfo(ProcessInfoReply {
                process_id: config.pid,
                runtime_cookie: config.cookie,
                command_line: cl,
                os,
                arch,
            })),
        ),
        AnyRequest::ProcessInfo2(_) => respond(
            machine,
            out,
            buf,
            &Response::Ok(Reply::ProcessInfo2(ProcessInfo2Reply {
                process_id: config.pid,
                runtime_cookie: config.cookie,
                command_line: cl,
                os,
                arch,
                managed_entrypoint_assembly_name: entry,
                clr_product_version: version,
            })),
        ),
        AnyRequest::ProcessInfo3(_) => respond(
            machine,
            out,
            buf,
            &Response::Ok(Reply::ProcessInfo3(ProcessInfo3Reply {
                version: 1,
                process_id: config.pid,
                runtime_cookie: config.cookie,
                command_line: cl,
                os,
                arch,
                managed_entrypoint_assembly_name: entry,
                clr_product_version: version,
                runtime_identifier: Text::Str("win-x64"),
                extension: &[],
            })),
        ),
        AnyRequest::ProcessEnvironment(_) => {
            let vars: Vec<Text<'_>> = config
                .environment
                .iter()
                .map(|v| Text::Str(v.as_str()))
                .collect();
            let len = environment_block_len(vars.iter().copied());
            respond(
                machine,
                out,
                buf,
                &Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
                    incoming_bytes: len as u32,
                    future: 0,
                })),
            )?;
            let mut block = vec![0u8; len];
            let n = encode_environment_block(vars.iter().copied(), &mut block)
                .expect("the environment encodes");
            machine
                .continuation_sent(n)
                .expect("the block is as long as announced");
            out.send(&block[..n])
        }
        AnyRequest::StopTracing(stop) => {
            let session = lock(&shared.sessions).get(&stop.session_id).cloned();
            if let Some(s) = session {
                s.stop.store(true, Ordering::SeqCst);
                // Like the runtime: answer only once the session's stream has ended.
                let deadline = Instant::now() + Duration::from_secs(30);
                let mut done = lock(&s.done);
                while !*done && Instant::now() < deadline {
                    done = s
                        .done_cv
                        .wait_timeout(done, TICK)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            }
            respond(
                machine,
                out,
                buf,
                &Response::Ok(Reply::SessionId(stop.session_id)),
            )
        }
        r if r.command().is_collect_tracing() => {
            let id = shared.next_session.fetch_add(1, Ordering::SeqCst);
            let session = Arc::new(Session {
                stop: AtomicBool::new(false),
                done: Mutex::new(false),
                done_cv: Condvar::new(),
            });
            lock(&shared.sessions).insert(id, Arc::clone(&session));
            let result = respond(machine, out, buf, &Response::Ok(Reply::SessionId(id)))
                .and_then(|()| stream_session(shared, config, machine, out, &session));
            *lock(&session.done) = true;
            session.done_cv.notify_all();
            if result.is_ok() {
                let _ = machine.finish_stream();
            }
            result
        }
        AnyRequest::ResumeRuntime(_) => {
            // Resumed before the reply leaves, so a client that got the reply sees it.
            shared.resumed.store(true, Ordering::SeqCst);
            respond(machine, out, buf, &Response::Ok(Reply::Ok(Hresult::S_OK)))
        }
        _ => respond(machine, out, buf, &Response::Ok(Reply::Ok(Hresult::S_OK))),
    }
}

/// Streams the continuation: `stream_len` bytes, or until stopped (then 64 KiB more, the
/// "rundown"). Stops early when the session is stopped.
fn stream_session(
    shared: &Shared,
    config: &Config,
    machine: &mut ServerConnection,
    out: &mut Out<'_>,
    session: &Session,
) -> Result<(), End> {
    let mut sent = 0u64;
    let mut rundown: Option<u64> = None;
    loop {
        let stopped = session.stop.load(Ordering::SeqCst);
        if shared.stop.load(Ordering::SeqCst) {
            return Err(End::Gone);
        }
        let limit = match (config.stream_len, rundown) {
            (Some(total), _) if stopped => sent.min(total),
            (Some(total), _) => total,
            (None, Some(end)) => end,
            (None, None) if stopped => {
                rundown = Some(sent + CHUNK as u64);
                continue;
            }
            (None, None) => u64::MAX,
        };
        if sent >= limit {
            return Ok(());
        }
        let n = (limit - sent).min(CHUNK as u64) as usize;
        let chunk = pattern(sent, n);
        machine
            .continuation_sent(n)
            .expect("an EventPipe stream takes any length");
        out.send(&chunk[..n])?;
        sent += n as u64;
        shared.streamed.fetch_add(n as u64, Ordering::SeqCst);
        if config.stream_len.is_none() && rundown.is_none() {
            // An endless session produces slowly, like a real one.
            thread::sleep(Duration::from_millis(2));
        }
    }
}
