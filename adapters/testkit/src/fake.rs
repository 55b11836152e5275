//! The fake runtime: [`ServerConnection`] machines behind a listening socket and/or a
//! reverse (connect) port, answering like a .NET 8 runtime unless told otherwise.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use dsipc::conn::{
    encode_environment_block, environment_block_len, Rejection, ServerConnection, ServerEvent,
    ServerStatus,
};
use dsipc::payload::{
    ErrorReply, ProcessEnvironmentReply, ProcessInfo2Reply, ProcessInfo3Reply, ProcessInfoReply,
    Reply, Request, Response,
};
use dsipc::wire::{Advertise, Guid, HeaderView, Hresult, Text, HEADER_LEN};
use dsipc::{AnyRequest, Command};

use crate::answer::{Answer, Identity, StreamSpec, Then};
use crate::pattern::fill_pattern;
use crate::socket::{bind_private, socket_name, unique};

/// How often blocked reads and sleeps look at the stop flag.
const TICK: Duration = Duration::from_millis(50);

/// Where a reverse-port runtime connects, and whether it waits for ResumeRuntime there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReversePort {
    /// The monitor's socket.
    pub path: PathBuf,
    /// `suspend` (the default of `DOTNET_DiagnosticPorts`): the fake runtime reports
    /// itself resumed only after ResumeRuntime arrived on this port.
    pub suspend: bool,
}

/// Configuration of a [`FakeRuntime`]. Start from [`Config::new`] (a .NET 8 identity with
/// this process's pid and a fresh cookie) and chain the setters.
#[derive(Debug, Clone)]
pub struct Config {
    /// ProcessInfo fields and the Advertise.
    pub identity: Identity,
    /// The `{key}` of the socket name (the runtime uses the process start time).
    pub key: u64,
    /// Listen as `dotnet-diagnostic-{pid}-{key}-socket` in this directory.
    pub listen_dir: Option<PathBuf>,
    /// Also (or only) connect to a monitor's reverse port.
    pub reverse_port: Option<ReversePort>,
    /// Per-command answers; a command not listed gets [`Answer::Default`].
    pub answers: HashMap<Command, Answer>,
    /// The environment ProcessEnvironment reports (`NAME=VALUE` entries).
    pub environment: Vec<String>,
    /// The stream of CollectTracing sessions (unless an [`Answer::Stream`] overrides it).
    pub stream: StreamSpec,
    /// How long a connection may stay silent before the fake runtime drops it, and the
    /// write timeout of streams whose reader stalls. A real runtime waits forever; the
    /// default (60 s) only keeps a broken test from hanging.
    pub idle_timeout: Duration,
    /// The answer to every command not listed in [`answers`](Self::answers) (default
    /// [`Answer::Default`]; [`Answer::Hang`] makes a silent socket that accepts and never
    /// answers).
    pub default_answer: Answer,
    /// A delay before every answer (a slow runtime, like .NET Core 3.1 under load).
    pub reply_delay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config::new()
    }
}

impl Config {
    /// A .NET 8 identity with this process's pid, a fresh cookie and key, the default
    /// stream, and no socket yet (add [`listen_in`](Self::listen_in) and/or
    /// [`reverse_port`](Self::reverse_port)).
    pub fn new() -> Self {
        let a = unique();
        let b = crate::socket::splitmix(a);
        let mut cookie = [0u8; 16];
        cookie[..8].copy_from_slice(&a.to_le_bytes());
        cookie[8..].copy_from_slice(&b.to_le_bytes());
        Config {
            identity: Identity::net8(u64::from(std::process::id()), Guid(cookie)),
            key: a % 1_000_000_000,
            listen_dir: None,
            reverse_port: None,
            answers: HashMap::new(),
            environment: vec![
                "PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
                "HOME=/home/app".to_string(),
                "DOTNET_gcServer=0".to_string(),
                "LANG=C.UTF-8".to_string(),
            ],
            stream: StreamSpec::default(),
            idle_timeout: Duration::from_secs(60),
            default_answer: Answer::Default,
            reply_delay: Duration::ZERO,
        }
    }

    /// Sets the socket key (`{key}` of the name; the CLI prefers the socket whose key is
    /// the process's start time).
    pub fn key(mut self, key: u64) -> Self {
        self.key = key;
        self
    }

    /// Sets the command line ProcessInfo reports.
    pub fn command_line(mut self, command_line: &str) -> Self {
        self.identity.command_line = command_line.to_string();
        self
    }

    /// Answers every command not set with [`answer`](Self::answer) with `answer`.
    pub fn default_answer(mut self, answer: Answer) -> Self {
        self.default_answer = answer;
        self
    }

    /// Waits `delay` before every answer.
    pub fn reply_delay(mut self, delay: Duration) -> Self {
        self.reply_delay = delay;
        self
    }

    /// Makes the fake runtime refuse what .NET Core 3.1 does not know: ProcessInfo 1 to 3
    /// (and the other Process commands) get UNKNOWN_COMMAND.
    pub fn like_netcore31(mut self) -> Self {
        for c in [
            Command::ProcessInfo,
            Command::ProcessInfo2,
            Command::ProcessInfo3,
            Command::ProcessEnvironment,
            Command::SetEnvironmentVariable,
            Command::CollectTracing3,
            Command::CollectTracing4,
            Command::CollectTracing5,
            Command::CollectTracing6,
        ] {
            self.answers.insert(c, Answer::unknown_command());
        }
        self
    }

    /// Listens in `dir` as `dotnet-diagnostic-{pid}-{key}-socket` (mode 0600).
    pub fn listen_in(mut self, dir: &Path) -> Self {
        self.listen_dir = Some(dir.to_path_buf());
        self
    }

    /// Connects to the monitor at `path` (`DOTNET_DiagnosticPorts=path,connect[,suspend]`).
    pub fn reverse_port(mut self, path: &Path, suspend: bool) -> Self {
        self.reverse_port = Some(ReversePort {
            path: path.to_path_buf(),
            suspend,
        });
        self
    }

    /// Sets the process id.
    pub fn pid(mut self, pid: u64) -> Self {
        self.identity.pid = pid;
        self
    }

    /// Sets the runtime cookie.
    pub fn cookie(mut self, cookie: Guid) -> Self {
        self.identity.cookie = cookie;
        self
    }

    /// Answers `command` with `answer`.
    pub fn answer(mut self, command: Command, answer: Answer) -> Self {
        self.answers.insert(command, answer);
        self
    }

    /// Sets the stream of CollectTracing sessions.
    pub fn stream(mut self, stream: StreamSpec) -> Self {
        self.stream = stream;
        self
    }

    /// Sets the environment block.
    pub fn environment(mut self, vars: &[&str]) -> Self {
        self.environment = vars.iter().map(|v| v.to_string()).collect();
        self
    }

    /// Makes the fake runtime refuse what .NET 8.0.4 does not know: CollectTracing3 to 6
    /// get UNKNOWN_COMMAND.
    pub fn like_net8_0_4(mut self) -> Self {
        for c in [
            Command::CollectTracing3,
            Command::CollectTracing4,
            Command::CollectTracing5,
            Command::CollectTracing6,
        ] {
            self.answers.insert(c, Answer::unknown_command());
        }
        self
    }

    /// Starts the fake runtime.
    pub fn start(self) -> io::Result<FakeRuntime> {
        FakeRuntime::start(self)
    }
}

/// One request the fake runtime received (or rejected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Connection number (in accept/connect order, both ports counted together).
    pub connection: u64,
    /// True if it came over the reverse port.
    pub reverse: bool,
    /// The request message as received (header and payload; for a rejection, the bytes
    /// the machine had).
    pub bytes: Vec<u8>,
    /// The command (`None` when the request was rejected before its header was read).
    pub command: Option<Command>,
    /// The header's reserved field.
    pub reserved: u16,
    /// Why it was rejected (the error reply sent carries `rejection.hresult`).
    pub rejection: Option<Rejection>,
}

impl Received {
    /// The typed request, decoded again from [`bytes`](Self::bytes).
    pub fn request(&self) -> Option<AnyRequest<'_>> {
        if self.rejection.is_some() {
            return None;
        }
        let command = self.command?;
        let payload = self.bytes.get(HEADER_LEN..)?;
        AnyRequest::decode(command, payload).ok().flatten()
    }
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEnd {
    /// Its configured length was sent.
    Completed,
    /// StopTracing for its session arrived (on another connection).
    Stopped,
    /// A write failed: the client closed the connection.
    PeerClosed,
    /// The client did not read for the idle timeout.
    TimedOut,
    /// The fake runtime shut down.
    Shutdown,
}

/// One EventPipe stream the fake runtime sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRecord {
    /// The session id sent in the OK reply.
    pub session_id: u64,
    /// The CollectTracing version.
    pub command: Command,
    /// Continuation bytes written.
    pub bytes: u64,
    /// Why it ended.
    pub end: StreamEnd,
}

#[derive(Debug, Default)]
struct State {
    received: Vec<Received>,
    streams: Vec<StreamRecord>,
    resumed: bool,
    advertised: u64,
    answers: HashMap<Command, Answer>,
    environment: Vec<String>,
}

struct Session {
    stop: Arc<AtomicU8>,
    thread: Option<JoinHandle<()>>,
    /// A second handle on the stream socket, to unblock a stalled write at shutdown.
    socket: Option<UnixStream>,
}

const RUNNING: u8 = 0;
const STOPPED: u8 = 1;
const SHUTDOWN: u8 = 2;

struct Shared {
    identity: Identity,
    default_answer: Answer,
    reply_delay: Duration,
    stream: StreamSpec,
    idle_timeout: Duration,
    has_reverse: bool,
    stop: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
    sessions: Mutex<HashMap<u64, Session>>,
    next_connection: AtomicU64,
    next_session: AtomicU64,
}

/// A fake .NET runtime for tests, built on the core's [`ServerConnection`].
///
/// - **Listen port** ([`Config::listen_in`]): a thread accepts connections and serves them
///   **one at a time**, like the runtime's single server thread (a client that connects and
///   stalls blocks the others, until the idle timeout).
/// - **Reverse port** ([`Config::reverse_port`]): another thread connects to the monitor,
///   sends the Advertise, serves one command, and reconnects, like the runtime (retrying
///   every 10 ms × 1.25 up to 500 ms while nobody listens).
/// - **EventPipe**: after the OK reply to any CollectTracing, the stream is written by its
///   own thread (as the runtime's session thread does) while the port goes on serving.
///   StopTracing for that session ends the stream, waits until the stream connection is
///   closed, and only then replies.
///
/// Every request is recorded ([`received`](Self::received)). Dropping it stops every
/// thread, closes every connection and removes its socket file.
pub struct FakeRuntime {
    shared: Arc<Shared>,
    socket_path: Option<PathBuf>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeRuntime")
            .field("identity", &self.shared.identity)
            .field("socket_path", &self.socket_path)
            .finish()
    }
}

impl FakeRuntime {
    /// Starts a fake runtime (see [`Config`]).
    pub fn start(config: Config) -> io::Result<FakeRuntime> {
        let shared = Arc::new(Shared {
            identity: config.identity.clone(),
            default_answer: config.default_answer.clone(),
            reply_delay: config.reply_delay,
            stream: config.stream,
            idle_timeout: config.idle_timeout,
            has_reverse: config.reverse_port.is_some(),
            stop: AtomicBool::new(false),
            state: Mutex::new(State {
                answers: config.answers.clone(),
                environment: config.environment.clone(),
                resumed: !config.reverse_port.as_ref().map_or(false, |r| r.suspend),
                ..State::default()
            }),
            changed: Condvar::new(),
            sessions: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(0),
            next_session: AtomicU64::new(0),
        });
        let mut rt = FakeRuntime {
            shared: shared.clone(),
            socket_path: None,
            threads: Vec::new(),
        };
        if let Some(dir) = &config.listen_dir {
            let path = dir.join(socket_name(config.identity.pid, config.key));
            let listener = bind_private(&path)?;
            rt.socket_path = Some(path);
            let s = shared.clone();
            rt.threads.push(
                thread::Builder::new()
                    .name("fake-runtime-listen".into())
                    .spawn(move || accept_loop(&s, listener))?,
            );
        }
        if let Some(rev) = config.reverse_port {
            let s = shared;
            rt.threads.push(
                thread::Builder::new()
                    .name("fake-runtime-reverse".into())
                    .spawn(move || reverse_loop(&s, &rev.path))?,
            );
        }
        Ok(rt)
    }

    /// The listening socket (`None` without [`Config::listen_in`]).
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket_path.as_deref()
    }

    /// The identity it reports.
    pub fn identity(&self) -> &Identity {
        &self.shared.identity
    }

    /// The Advertise it sends on the reverse port.
    pub fn advertise(&self) -> Advertise {
        self.shared.advertise()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Changes the answer to `command` from now on.
    pub fn set_answer(&self, command: Command, answer: Answer) {
        self.state().answers.insert(command, answer);
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state().received.clone()
    }

    /// Waits until at least `count` requests were received (or `timeout`); returns them.
    pub fn wait_received(&self, count: usize, timeout: Duration) -> Vec<Received> {
        self.shared
            .wait(timeout, |s| s.received.len() >= count)
            .received
            .clone()
    }

    /// Every stream that ended so far.
    pub fn streams(&self) -> Vec<StreamRecord> {
        self.state().streams.clone()
    }

    /// Waits until at least `count` streams ended (or `timeout`); returns them.
    pub fn wait_streams(&self, count: usize, timeout: Duration) -> Vec<StreamRecord> {
        self.shared
            .wait(timeout, |s| s.streams.len() >= count)
            .streams
            .clone()
    }

    /// The environment as it is now (SetEnvironmentVariable changes it).
    pub fn environment(&self) -> Vec<String> {
        self.state().environment.clone()
    }

    /// False while suspended: until ResumeRuntime arrives on a suspending reverse port.
    pub fn is_resumed(&self) -> bool {
        self.state().resumed
    }

    /// Waits until resumed; returns [`is_resumed`](Self::is_resumed).
    pub fn wait_resumed(&self, timeout: Duration) -> bool {
        self.shared.wait(timeout, |s| s.resumed).resumed
    }

    /// How many times it has advertised on the reverse port.
    pub fn advertised(&self) -> u64 {
        self.state().advertised
    }

    /// Waits until it advertised at least `count` times; returns the count.
    pub fn wait_advertised(&self, count: u64, timeout: Duration) -> u64 {
        self.shared
            .wait(timeout, |s| s.advertised >= count)
            .advertised
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(path) = &self.socket_path {
            // Wake the accept loop.
            let _ = UnixStream::connect(path);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let sessions: Vec<Session> = self
            .shared
            .sessions_lock()
            .drain()
            .map(|(_, s)| s)
            .collect();
        for mut s in sessions {
            let _ = s
                .stop
                .compare_exchange(RUNNING, SHUTDOWN, Ordering::SeqCst, Ordering::SeqCst);
            if let Some(sock) = s.socket.take() {
                let _ = sock.shutdown(Shutdown::Both);
            }
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in a test thread must not hide the recorded state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sessions_lock(&self) -> MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }

    fn wait(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&State) -> bool,
    ) -> MutexGuard<'_, State> {
        let deadline = Instant::now() + timeout;
        let mut guard = self.lock();
        while !done(&guard) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            guard = match self.changed.wait_timeout(guard, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        guard
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn advertise(&self) -> Advertise {
        Advertise {
            runtime_cookie: self.identity.cookie,
            process_id: self.identity.pid,
            future: 0,
        }
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: UnixListener) {
    for conn in listener.incoming() {
        if shared.stopping() {
            return;
        }
        match conn {
            Ok(stream) => serve(shared, stream, false),
            // Out of descriptors, for example: try again a little later.
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn reverse_loop(shared: &Arc<Shared>, path: &Path) {
    let mut backoff = Duration::from_millis(10);
    while !shared.stopping() {
        match UnixStream::connect(path) {
            Ok(stream) => {
                backoff = Duration::from_millis(10);
                serve(shared, stream, true);
            }
            Err(_) => {
                sleep_unless_stopped(shared, backoff);
                backoff = (backoff * 5 / 4).min(Duration::from_millis(500));
            }
        }
    }
}

fn sleep_unless_stopped(shared: &Shared, total: Duration) {
    let deadline = Instant::now() + total;
    loop {
        let now = Instant::now();
        if now >= deadline || shared.stopping() {
            return;
        }
        thread::sleep((deadline - now).min(TICK));
    }
}

/// Serves one connection: (advertise,) read one request, answer it.
fn serve(shared: &Arc<Shared>, mut stream: UnixStream, reverse: bool) {
    let connection = shared.next_connection.fetch_add(1, Ordering::SeqCst);
    let mut machine = if reverse {
        ServerConnection::advertising(shared.advertise())
    } else {
        ServerConnection::new()
    };
    if reverse {
        let mut adv = [0u8; 64];
        let n = match machine.poll_transmit(&mut adv) {
            Ok(n) => n,
            Err(_) => return,
        };
        if stream.write_all(&adv[..n]).is_err() {
            return;
        }
        shared.update(|s| s.advertised += 1);
    }
    if stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    let mut buf: Vec<u8> = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    let mut last_input = Instant::now();
    loop {
        let handled = machine.handle_input(&buf);
        match handled.status {
            ServerStatus::Event(ServerEvent::Request { request, reserved }) => {
                let bytes = buf[..handled.consumed].to_vec();
                shared.update(|s| {
                    s.received.push(Received {
                        connection,
                        reverse,
                        bytes,
                        command: Some(request.command()),
                        reserved,
                        rejection: None,
                    })
                });
                if shared.reply_delay > Duration::ZERO {
                    sleep_unless_stopped(shared, shared.reply_delay);
                }
                answer(shared, stream, machine, &request, reverse);
                return;
            }
            ServerStatus::Event(ServerEvent::Rejected(rejection)) => {
                reject(
                    shared,
                    &mut stream,
                    &mut machine,
                    &buf,
                    connection,
                    reverse,
                    rejection,
                );
                return;
            }
            ServerStatus::Event(_) => {
                buf.drain(..handled.consumed);
                continue;
            }
            ServerStatus::Partial { .. } => {}
            ServerStatus::Done => return,
        }
        match stream.read(&mut chunk) {
            Ok(0) => {
                if let Some(ServerEvent::Rejected(rejection)) = machine.handle_eof() {
                    reject(
                        shared,
                        &mut stream,
                        &mut machine,
                        &buf,
                        connection,
                        reverse,
                        rejection,
                    );
                }
                return;
            }
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                last_input = Instant::now();
            }
            Err(e) if is_timeout(&e) => {
                if shared.stopping() || last_input.elapsed() >= shared.idle_timeout {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn reject(
    shared: &Shared,
    stream: &mut UnixStream,
    machine: &mut ServerConnection,
    buf: &[u8],
    connection: u64,
    reverse: bool,
    rejection: Rejection,
) {
    let view = HeaderView::ref_from(buf);
    let command = view.map(|v| v.command());
    let reserved = view.map_or(0, |v| v.reserved.get());
    shared.update(|s| {
        s.received.push(Received {
            connection,
            reverse,
            bytes: buf.to_vec(),
            command,
            reserved,
            rejection: Some(rejection),
        })
    });
    let mut out = [0u8; 64];
    if let Ok(n) = machine.poll_transmit(&mut out) {
        let _ = stream.write_all(&out[..n]);
    }
}

fn send(stream: &mut UnixStream, machine: &mut ServerConnection, response: &Response<'_>) -> bool {
    let mut out = vec![0u8; response.encoded_len()];
    match machine.send_response(response, &mut out) {
        Ok(n) => stream.write_all(&out[..n]).is_ok(),
        Err(_) => false,
    }
}

fn answer(
    shared: &Arc<Shared>,
    mut stream: UnixStream,
    mut machine: ServerConnection,
    request: &AnyRequest<'_>,
    reverse: bool,
) {
    let command = request.command();
    let configured = shared
        .lock()
        .answers
        .get(&command)
        .cloned()
        .unwrap_or_else(|| shared.default_answer.clone());
    let ok = Response::Ok(Reply::Ok(Hresult::S_OK));
    match configured {
        Answer::IgnoreStop if command == Command::StopTracing => {
            let id = match request {
                AnyRequest::StopTracing(stop) => stop.session_id,
                _ => 0,
            };
            send(
                &mut stream,
                &mut machine,
                &Response::Ok(Reply::SessionId(id)),
            );
        }
        Answer::EnvironmentAnnouncing(announced) if command == Command::ProcessEnvironment => {
            flood_environment(shared, &mut stream, &mut machine, announced);
        }
        Answer::Close => {}
        Answer::Hang => hang(shared, &mut stream),
        Answer::Raw(bytes) => {
            let _ = stream.write_all(&bytes);
        }
        Answer::RawThen(bytes, then) => {
            if stream.write_all(&bytes).is_ok() {
                raw_tail(shared, &mut stream, then);
            }
        }
        Answer::Error(hresult) => {
            send(
                &mut stream,
                &mut machine,
                &Response::Error(ErrorReply::new(hresult)),
            );
        }
        Answer::ErrorWithMessage(hresult, message) => {
            let reply = ErrorReply {
                hresult,
                message: Some(Text::Str(&message)),
            };
            send(&mut stream, &mut machine, &Response::Error(reply));
        }
        Answer::Status(hresult) => {
            send(&mut stream, &mut machine, &Response::Ok(Reply::Ok(hresult)));
        }
        Answer::Stream(spec) if command.is_collect_tracing() => {
            start_session(shared, stream, machine, command, spec);
        }
        Answer::Stream(_)
        | Answer::Default
        | Answer::IgnoreStop
        | Answer::EnvironmentAnnouncing(_) => match request {
            AnyRequest::ProcessInfo(_)
            | AnyRequest::ProcessInfo2(_)
            | AnyRequest::ProcessInfo3(_) => {
                let id = &shared.identity;
                let base = ProcessInfoReply {
                    process_id: id.pid,
                    runtime_cookie: id.cookie,
                    command_line: Text::Str(&id.command_line),
                    os: Text::Str(&id.os),
                    arch: Text::Str(&id.arch),
                };
                let v2 = ProcessInfo2Reply {
                    process_id: base.process_id,
                    runtime_cookie: base.runtime_cookie,
                    command_line: base.command_line,
                    os: base.os,
                    arch: base.arch,
                    managed_entrypoint_assembly_name: Text::Str(&id.entrypoint),
                    clr_product_version: Text::Str(&id.clr_version),
                };
                let reply = match command {
                    Command::ProcessInfo => Reply::ProcessInfo(base),
                    Command::ProcessInfo2 => Reply::ProcessInfo2(v2),
                    _ => Reply::ProcessInfo3(ProcessInfo3Reply {
                        version: 1,
                        process_id: v2.process_id,
                        runtime_cookie: v2.runtime_cookie,
                        command_line: v2.command_line,
                        os: v2.os,
                        arch: v2.arch,
                        managed_entrypoint_assembly_name: v2.managed_entrypoint_assembly_name,
                        clr_product_version: v2.clr_product_version,
                        runtime_identifier: Text::Str(&id.runtime_identifier),
                        extension: &[],
                    }),
                };
                send(&mut stream, &mut machine, &Response::Ok(reply));
            }
            AnyRequest::ProcessEnvironment(_) => {
                let vars = shared.lock().environment.clone();
                let texts = vars.iter().map(|v| Text::Str(v));
                let len = environment_block_len(texts.clone());
                let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
                    incoming_bytes: len as u32,
                    future: 0,
                }));
                if !send(&mut stream, &mut machine, &reply) {
                    return;
                }
                let mut block = vec![0u8; len];
                if let Ok(n) = encode_environment_block(texts, &mut block) {
                    if machine.continuation_sent(n).is_ok() {
                        let _ = stream.write_all(&block[..n]);
                    }
                }
            }
            AnyRequest::SetEnvironmentVariable(set) => {
                let name: String = set.name.chars_lossy().collect();
                let value: Option<String> = if set.value.is_null() {
                    None
                } else {
                    Some(set.value.chars_lossy().collect())
                };
                shared.update(|s| {
                    let prefix = format!("{}=", name);
                    s.environment.retain(|v| !v.starts_with(&prefix));
                    if let Some(v) = value {
                        s.environment.push(format!("{}{}", prefix, v));
                    }
                });
                send(&mut stream, &mut machine, &ok);
            }
            AnyRequest::ResumeRuntime(_) => {
                // As on .NET 8: with a suspending reverse port, only a Resume that arrives
                // there resumes the runtime.
                if reverse || !shared.has_reverse {
                    shared.update(|s| s.resumed = true);
                }
                send(&mut stream, &mut machine, &ok);
            }
            AnyRequest::StopTracing(stop) => {
                stop_session(shared, stop.session_id);
                send(
                    &mut stream,
                    &mut machine,
                    &Response::Ok(Reply::SessionId(stop.session_id)),
                );
            }
            _ if command.is_collect_tracing() => {
                start_session(shared, stream, machine, command, shared.stream);
            }
            _ => {
                send(&mut stream, &mut machine, &ok);
            }
        },
    }
}

/// Announces `announced` bytes of environment and sends the configured entries over and
/// over until that many went out, the client left, or shutdown. The count announces every
/// whole repetition that fits: with `announced` = 4 + k × (the entries' size) the block is
/// well-formed (k repetitions).
fn flood_environment(
    shared: &Shared,
    stream: &mut UnixStream,
    machine: &mut ServerConnection,
    announced: u32,
) {
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: announced,
        future: 0,
    }));
    if !send(stream, machine, &reply) {
        return;
    }
    let vars = shared.lock().environment.clone();
    let texts = vars.iter().map(|v| Text::Str(v));
    let mut block = vec![0u8; environment_block_len(texts.clone())];
    let n = match encode_environment_block(texts, &mut block) {
        Ok(n) if n > 4 => n,
        _ => return,
    };
    let entries = &block[4..n];
    let reps = u64::from(announced).saturating_sub(4) / entries.len() as u64;
    let count = (reps * vars.len() as u64).min(u64::from(u32::MAX)) as u32;
    let _ = stream.set_write_timeout(Some(shared.idle_timeout));
    if stream.write_all(&count.to_le_bytes()).is_err() {
        return;
    }
    let mut left = u64::from(announced).saturating_sub(4);
    while left > 0 && !shared.stopping() {
        let take = (entries.len() as u64).min(left) as usize;
        if stream.write_all(&entries[..take]).is_err() {
            return;
        }
        left -= take as u64;
    }
}

/// Holds a connection without answering until the client closes it.
/// [`Then`] after [`Answer::RawThen`]'s bytes: ends when a write fails (the client left),
/// at the idle timeout or at shutdown.
fn raw_tail(shared: &Shared, stream: &mut UnixStream, then: Then) {
    let started = Instant::now();
    let pause = match then {
        Then::Stall => return hang(shared, stream),
        Then::Trickle(pause) => pause,
        Then::Flood => Duration::ZERO,
    };
    let _ = stream.set_write_timeout(Some(TICK));
    let chunk = vec![0u8; if pause.is_zero() { 64 * 1024 } else { 1 }];
    while !shared.stopping() && started.elapsed() < shared.idle_timeout {
        match stream.write(&chunk) {
            Ok(_) => {}
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

fn hang(shared: &Shared, stream: &mut UnixStream) {
    let started = Instant::now();
    let mut sink = [0u8; 1024];
    while !shared.stopping() && started.elapsed() < shared.idle_timeout {
        match stream.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn start_session(
    shared: &Arc<Shared>,
    mut stream: UnixStream,
    mut machine: ServerConnection,
    command: Command,
    spec: StreamSpec,
) {
    // Pointer-like ids, as the runtime's are.
    let session_id = 0x7f3a_b000_1000 + 0x40 * shared.next_session.fetch_add(1, Ordering::SeqCst);
    let stop = Arc::new(AtomicU8::new(RUNNING));
    // Registered before the reply goes out, so that a fast StopTracing finds it.
    let mut sessions = shared.sessions_lock();
    if !send(
        &mut stream,
        &mut machine,
        &Response::Ok(Reply::SessionId(session_id)),
    ) {
        return;
    }
    let socket = stream.try_clone().ok();
    let s = shared.clone();
    let flag = stop.clone();
    let thread = thread::Builder::new()
        .name("fake-runtime-stream".into())
        .spawn(move || stream_session(&s, stream, machine, command, session_id, spec, &flag));
    if let Ok(t) = thread {
        sessions.insert(
            session_id,
            Session {
                stop,
                thread: Some(t),
                socket,
            },
        );
    }
}

fn stream_session(
    shared: &Shared,
    mut stream: UnixStream,
    mut machine: ServerConnection,
    command: Command,
    session_id: u64,
    spec: StreamSpec,
    stop: &AtomicU8,
) {
    let _ = stream.set_write_timeout(Some(shared.idle_timeout));
    let mut buf = vec![0u8; spec.chunk.max(1)];
    let mut sent = 0u64;
    let end = loop {
        match stop.load(Ordering::SeqCst) {
            RUNNING => {}
            STOPPED => break StreamEnd::Stopped,
            _ => break StreamEnd::Shutdown,
        }
        let n = match spec.len {
            Some(len) => (len - sent).min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        if n == 0 {
            break StreamEnd::Completed;
        }
        fill_pattern(sent, &mut buf[..n]);
        if machine.continuation_sent(n).is_err() {
            break StreamEnd::Completed;
        }
        if let Err(e) = stream.write_all(&buf[..n]) {
            break if stop.load(Ordering::SeqCst) == SHUTDOWN {
                StreamEnd::Shutdown
            } else if is_timeout(&e) {
                StreamEnd::TimedOut
            } else {
                StreamEnd::PeerClosed
            };
        }
        sent += n as u64;
        if spec.pause > Duration::ZERO {
            thread::sleep(spec.pause);
        }
    };
    if spec.end_marker && matches!(end, StreamEnd::Completed | StreamEnd::Stopped) {
        // The nettrace end: the last object's end tag, then the end-of-stream byte.
        if machine.continuation_sent(2).is_ok() && stream.write_all(&[0x06, 0x01]).is_ok() {
            sent += 2;
        }
    }
    let _ = machine.finish_stream();
    let _ = stream.shutdown(Shutdown::Both);
    drop(stream);
    shared.update(|s| {
        s.streams.push(StreamRecord {
            session_id,
            command,
            bytes: sent,
            end,
        })
    });
}

/// Ends a session's stream and waits until its connection is closed (the runtime replies
/// to StopTracing only after the session's data has been flushed).
fn stop_session(shared: &Shared, session_id: u64) {
    let session = shared.sessions_lock().remove(&session_id);
    if let Some(mut session) = session {
        let _ = session
            .stop
            .compare_exchange(RUNNING, STOPPED, Ordering::SeqCst, Ordering::SeqCst);
        if let Some(t) = session.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::socket::TempDir;
    use dsipc::payload::ProcessInfo;
    use dsipc::{ClientConnection, ClientEvent, Status};

    fn roundtrip<R: Request>(path: &Path, req: &R) -> Vec<String> {
        let mut s = UnixStream::connect(path).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut c = ClientConnection::new();
        let mut tx = vec![0u8; 4096];
        let n = c.send_request(req, &mut tx).unwrap();
        s.write_all(&tx[..n]).unwrap();
        let mut all = Vec::new();
        s.read_to_end(&mut all).unwrap();
        let mut out = Vec::new();
        let mut at = 0;
        loop {
            let h = c.handle_input(&all[at..]).unwrap();
            at += h.consumed;
            match h.status {
                Status::Event(e) => out.push(format!("{:?}", e)),
                _ => break,
            }
        }
        if let Some(e) = c.handle_eof().unwrap() {
            out.push(format!("{:?}", e));
        }
        out
    }

    #[test]
    fn answers_process_info_and_records() {
        let dir = TempDir::new("dsipc-tk").unwrap();
        let rt = Config::new()
            .pid(4242)
            .listen_in(dir.path())
            .start()
            .unwrap();
        let path = rt.socket_path().unwrap().to_path_buf();
        assert!(path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("dotnet-diagnostic-4242-"));
        let events = roundtrip(&path, &ProcessInfo);
        assert!(events[0].contains("process_id: 4242"), "{:?}", events);
        let got = rt.wait_received(1, Duration::from_secs(5));
        assert_eq!(got[0].command, Some(Command::ProcessInfo));
        assert!(matches!(got[0].request(), Some(AnyRequest::ProcessInfo(_))));
        let _ = ClientEvent::EndOfStream;
        drop(rt);
        assert!(!path.exists());
    }
}
