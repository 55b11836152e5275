//! Proof that the dsipc core needs neither `std` nor an allocator: a `#![no_std]`,
//! `#![no_main]` binary with `panic = "abort"`, no `alloc`, no libc and no C start files,
//! linked statically for x86_64 Linux with its own `_start` (see `.cargo/config.toml`). It
//! encodes and decodes requests and replies, and runs the client and server machines against
//! each other (plain and reverse-port, reply, environment block, EventPipe stream,
//! rejection), then exits 0 through the `exit_group` syscall, or 1 naming the failed step.
//!
//! ```sh
//! cd nostd-check && cargo build --release && ./target/x86_64-unknown-linux-gnu/release/dsipc-nostd-check
//! DEFMT_LOG=trace cargo build --release --features defmt   # the core's defmt logs, stub logger
//! ```
//!
//! `scripts/lint.sh` builds, inspects (no dynamic section, no undefined symbol) and runs both.
#![no_std]
#![no_main]
// Keep LLVM from turning the loops of `mem` below into calls to themselves.
#![no_builtins]

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
compile_error!("nostd-check's entry point and syscalls are written for x86_64 Linux");

use core::fmt::{self, Write as _};

use dsipc::conn::{encode_environment_block, environment_block_len, ServerConnection};
use dsipc::fixtures;
use dsipc::payload::{
    AnyRequest, ErrorReply, ProcessEnvironment, ProcessEnvironmentReply, ProcessInfo, Reply,
    Request, Response,
};
use dsipc::recv::{Poll, RecvBuffer, RecvError};
use dsipc::transport::{key_from_proc_stat, DiagnosticPorts, SocketName};
use dsipc::wire::{Header, Hresult, HEADER_LEN};
use dsipc::{ClientConnection, ClientError, ClientEvent, ServerEvent, ServerStatus, Status};

// ---------------------------------------------------------------------------------------
// The platform: entry point, syscalls, panic handler, and the mem* functions the compiler
// may call (normally libc's).

core::arch::global_asm!(
    ".globl _start",
    ".type _start,@function",
    "_start:",
    "xor ebp, ebp",
    "and rsp, -16",
    "call {entry}",
    "ud2",
    entry = sym entry,
);

mod sys {
    use core::arch::asm;

    /// `write(1, bytes)`.
    pub fn print(bytes: &[u8]) {
        let mut done = 0;
        while done < bytes.len() {
            let ret: isize;
            // SAFETY: write(2) reads `len` bytes from a valid slice.
            unsafe {
                asm!(
                    "syscall",
                    inlateout("rax") 1isize => ret,
                    in("rdi") 1usize,
                    in("rsi") bytes[done..].as_ptr(),
                    in("rdx") bytes.len() - done,
                    lateout("rcx") _,
                    lateout("r11") _,
                    options(nostack),
                );
            }
            if ret <= 0 {
                return;
            }
            done += ret as usize;
        }
    }

    /// `exit_group(code)`.
    pub fn exit(code: i32) -> ! {
        // SAFETY: exit_group(2) does not return.
        unsafe {
            asm!("syscall", in("rax") 231usize, in("rdi") code as isize, options(noreturn, nostack));
        }
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut line = Line::new();
    let _ = writeln!(line, "nostd-check: panic: {}", info.message());
    sys::print(line.as_bytes());
    sys::exit(101)
}

/// The precompiled `core` (built for unwinding) refers to the personality routine from its
/// unwind tables; with `panic = "abort"` nothing unwinds, so it is never called.
#[no_mangle]
extern "C" fn rust_eh_personality() {}

mod mem {
    //! Byte loops; `#![no_builtins]` keeps them from being compiled into calls to themselves.

    /// # Safety
    /// As C's `memcpy`.
    #[no_mangle]
    pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        let mut i = 0;
        while i < n {
            *dst.add(i) = *src.add(i);
            i += 1;
        }
        dst
    }

    /// # Safety
    /// As C's `memmove`.
    #[no_mangle]
    pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
        if (dst as usize) <= (src as usize) {
            let mut i = 0;
            while i < n {
                *dst.add(i) = *src.add(i);
                i += 1;
            }
        } else {
            let mut i = n;
            while i > 0 {
                i -= 1;
                *dst.add(i) = *src.add(i);
            }
        }
        dst
    }

    /// # Safety
    /// As C's `memset`.
    #[no_mangle]
    pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
        let mut i = 0;
        while i < n {
            *dst.add(i) = c as u8;
            i += 1;
        }
        dst
    }

    /// # Safety
    /// As C's `memcmp`.
    #[no_mangle]
    pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        let mut i = 0;
        while i < n {
            let (x, y) = (*a.add(i), *b.add(i));
            if x != y {
                return x as i32 - y as i32;
            }
            i += 1;
        }
        0
    }

    /// # Safety
    /// As C's `bcmp`.
    #[no_mangle]
    pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
        memcmp(a, b, n)
    }
}

/// A fixed-size text buffer for `core::fmt` output (no allocator).
struct Line {
    buf: [u8; 256],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Line {
            buf: [0; 256],
            len: 0,
        }
    }
    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }
}

impl fmt::Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(feature = "defmt")]
mod logger {
    //! A stub defmt logger: counts the encoded bytes the core's log statements produce.
    use core::sync::atomic::{AtomicUsize, Ordering};

    pub static BYTES: AtomicUsize = AtomicUsize::new(0);

    #[defmt::global_logger]
    struct Logger;

    // SAFETY: single-threaded program; the counter is atomic anyway.
    unsafe impl defmt::Logger for Logger {
        fn acquire() {}
        unsafe fn flush() {}
        unsafe fn release() {}
        unsafe fn write(bytes: &[u8]) {
            BYTES.fetch_add(bytes.len(), Ordering::Relaxed);
        }
    }

    defmt::timestamp!("{=u32}", 0);

    #[defmt::panic_handler]
    fn defmt_panic() -> ! {
        crate::sys::exit(102)
    }
}

extern "C" fn entry() -> ! {
    match run() {
        Ok(events) => {
            let mut line = Line::new();
            let _ = write!(line, "nostd-check: ok ({} events", events);
            #[cfg(feature = "defmt")]
            let _ = write!(
                line,
                ", {} defmt bytes",
                logger::BYTES.load(core::sync::atomic::Ordering::Relaxed)
            );
            let _ = writeln!(line, ")");
            sys::print(line.as_bytes());
            sys::exit(0)
        }
        Err(step) => {
            sys::print(b"nostd-check: FAILED: ");
            sys::print(step.as_bytes());
            sys::print(b"\n");
            sys::exit(1)
        }
    }
}

// ---------------------------------------------------------------------------------------
// The checks.

type Step = &'static str;

macro_rules! check {
    ($cond:expr, $step:expr) => {
        if !$cond {
            return Err($step);
        }
    };
}

/// Feeds `rx` to a client machine `chunk` bytes at a time through the core's receive buffer
/// over 1 KiB of stack, the way an adapter does, calling `on_event` for each event, then EOF.
fn pump_client(
    conn: &mut ClientConnection,
    rx: &[u8],
    chunk: usize,
    mut on_event: impl FnMut(&mut ClientConnection, ClientEvent<'_>) -> Result<(), Step>,
) -> Result<usize, Step> {
    let mut storage = [0u8; 1024];
    let mut buf = RecvBuffer::new(&mut storage[..]);
    let (mut fed, mut events) = (0usize, 0usize);
    loop {
        match buf.poll_client(conn) {
            Ok(Poll::Event(ev)) => {
                events += 1;
                on_event(conn, ev)?;
            }
            Ok(Poll::NeedInput) | Ok(Poll::End) if fed < rx.len() => {
                let n = chunk.min(rx.len() - fed);
                fed += buf.push(&rx[fed..fed + n]).map_err(|_| "client buffer")?;
            }
            Ok(Poll::NeedInput) => buf.eof(),
            Ok(Poll::End) => return Ok(events),
            Err(RecvError::BufferTooSmall(_)) => return Err("client needs more than its buffer"),
            Err(_) => return Err("client error"),
        }
    }
}

/// Serves one request: feeds `rx` to a server machine, answers the request with `respond`
/// (which returns the bytes written to `tx`), and returns how many bytes the server sent.
fn serve(
    server: &mut ServerConnection,
    rx: &[u8],
    tx: &mut [u8],
    respond: impl FnOnce(&mut ServerConnection, AnyRequest<'_>, &mut [u8]) -> Result<usize, Step>,
) -> Result<usize, Step> {
    let mut sent = server.poll_transmit(tx).map_err(|_| "advertise")?;
    let h = server.handle_input(rx);
    check!(h.consumed == rx.len(), "server consumed");
    match h.status {
        ServerStatus::Event(ServerEvent::Request { request, .. }) => {
            sent += respond(server, request, &mut tx[sent..])?;
        }
        ServerStatus::Event(ServerEvent::Rejected(r)) => {
            let reply = r.reply();
            let dst = tx.get_mut(sent..sent + reply.len()).ok_or("rejection")?;
            dst.copy_from_slice(&reply);
            sent += reply.len();
        }
        _ => return Err("server event"),
    }
    check!(server.should_close(), "server done");
    Ok(sent)
}

/// Encodes `r`, then decodes it as a runtime would: equal.
fn round_trip(r: &AnyRequest<'_>, req: &mut [u8]) -> Result<(), Step> {
    let n = r.encode(req).map_err(|_| "encode request")?;
    let h = Header::parse(&req[..n]).map_err(|_| "parse header")?;
    check!(h.command() == r.command(), "header command");
    let back = AnyRequest::decode(h.command(), &req[HEADER_LEN..n]).map_err(|_| "decode")?;
    check!(back == Some(*r), "request round trip");
    Ok(())
}

fn run() -> Result<usize, Step> {
    let mut events = 0;
    let mut req = [0u8; 512];
    let mut tx = [0u8; 2048];
    let mut utf8 = [0u8; 256];

    // 1. Requests encode and decode (as a runtime would) to equal values: the crate's samples: one of every request, the edge values of every type, and a
    // session with dotnet-trace's default providers.
    let mut result = Ok(());
    fixtures::each_request(|r| {
        if result.is_ok() {
            result = round_trip(&r, &mut req);
        }
    });
    result?;
    for r in fixtures::REQUESTS.iter() {
        round_trip(r, &mut req)?;
    }
    round_trip(&fixtures::COLLECT_TRACING2.into(), &mut req)?;

    // 2. ProcessInfo: server answers, client reads the reply 3 bytes at a time.
    let info = fixtures::PROCESS_INFO2.as_process_info();
    let mut client = ClientConnection::new();
    let n = client
        .send_request(&ProcessInfo, &mut req)
        .map_err(|_| "send ProcessInfo")?;
    let mut server = ServerConnection::new();
    let sent = serve(&mut server, &req[..n], &mut tx, |s, r, out| {
        check!(
            r == AnyRequest::ProcessInfo(ProcessInfo),
            "served ProcessInfo"
        );
        s.send_response(&Response::Ok(Reply::ProcessInfo(info)), out)
            .map_err(|_| "send reply")
    })?;
    let mut pid = 0;
    events += pump_client(&mut client, &tx[..sent], 3, |_, ev| {
        if let ClientEvent::Reply(Reply::ProcessInfo(p)) = ev {
            pid = p.process_id;
            let s = p.command_line.to_utf8(&mut utf8).map_err(|_| "utf8")?;
            check!(s == "/usr/bin/dotnet app.dll", "command line");
        }
        Ok(())
    })?;
    check!(pid == 4242, "pid");

    // 3. ProcessEnvironment: reply, then the environment block written by the server side.
    let vars = fixtures::ENVIRONMENT;
    let mut client = ClientConnection::new();
    let n = client
        .send_request(&ProcessEnvironment, &mut req)
        .map_err(|_| "send ProcessEnvironment")?;
    let mut server = ServerConnection::new();
    let sent = serve(&mut server, &req[..n], &mut tx, |s, _, out| {
        let len = environment_block_len(vars.iter().copied());
        let reply = Reply::ProcessEnvironment(ProcessEnvironmentReply {
            incoming_bytes: len as u32,
            future: 0,
        });
        let n = s
            .send_response(&Response::Ok(reply), out)
            .map_err(|_| "env reply")?;
        let m = encode_environment_block(vars.iter().copied(), &mut out[n..])
            .map_err(|_| "env block")?;
        s.continuation_sent(m).map_err(|_| "env continuation")?;
        Ok(n + m)
    })?;
    let mut seen = 0;
    events += pump_client(&mut client, &tx[..sent], 7, |_, ev| {
        if let ClientEvent::EnvironmentVariable(t) = ev {
            check!(t == vars[seen], "environment entry");
            seen += 1;
        }
        Ok(())
    })?;
    check!(seen == vars.len(), "environment count");

    // 4. CollectTracing2: session id, then stream bytes until EOF.
    let mut client = ClientConnection::new();
    let n = client
        .send_request(&fixtures::COLLECT_TRACING2, &mut req)
        .map_err(|_| "send CollectTracing2")?;
    let mut server = ServerConnection::new();
    let sent = serve(&mut server, &req[..n], &mut tx, |s, r, out| {
        check!(
            r == AnyRequest::CollectTracing2(fixtures::COLLECT_TRACING2),
            "served CollectTracing2"
        );
        let n = s
            .send_response(&Response::Ok(Reply::SessionId(7)), out)
            .map_err(|_| "session reply")?;
        out[n..n + 8].copy_from_slice(b"Nettrace");
        s.continuation_sent(8).map_err(|_| "stream")?;
        s.finish_stream().map_err(|_| "finish")?;
        Ok(n + 8)
    })?;
    let (mut stream, mut ended) = (0, false);
    events += pump_client(&mut client, &tx[..sent], 5, |c, ev| {
        match ev {
            ClientEvent::StreamData(d) => {
                check!(c.is_streaming(), "streaming");
                stream += d.len()
            }
            ClientEvent::EndOfStream => ended = true,
            _ => {}
        }
        Ok(())
    })?;
    check!(stream == 8 && ended, "stream");

    // 5. A bad magic is rejected with UNKNOWN_MAGIC, as the runtime does.
    let mut client = ClientConnection::new();
    let n = client
        .send_request(&ProcessInfo, &mut req)
        .map_err(|_| "send")?;
    req[12] = b'2';
    let mut server = ServerConnection::new();
    let sent = serve(&mut server, &req[..n], &mut tx, |_, _, _| {
        Err("not rejected")
    })?;
    let mut hresult = Hresult::S_OK;
    events += pump_client(&mut client, &tx[..sent], 64, |_, ev| {
        if let ClientEvent::Error(e) = ev {
            check!(e == ErrorReply::new(e.hresult), "error reply");
            hresult = e.hresult;
        }
        Ok(())
    })?;
    check!(hresult == Hresult::CORDIAGIPC_E_UNKNOWN_MAGIC, "rejection");

    // 6. Reverse port: the runtime side advertises, the monitor side then sends a request.
    let adv = fixtures::ADVERTISE;
    let mut server = ServerConnection::advertising(adv);
    let mut client = ClientConnection::expecting_advertise();
    let a = server.poll_transmit(&mut tx).map_err(|_| "advertise")?;
    let mut got = None;
    let h = client
        .handle_input(&tx[..a])
        .map_err(|_| "client advertise")?;
    if let Status::Event(ClientEvent::Advertise(x)) = h.status {
        got = Some(x);
    }
    check!(got == Some(adv), "advertise");
    let n = client
        .send_request(&ProcessInfo, &mut req)
        .map_err(|_| "send after advertise")?;
    let sent = serve(&mut server, &req[..n], &mut tx, |s, _, out| {
        s.send_response(&Response::Ok(Reply::ProcessInfo(info)), out)
            .map_err(|_| "reply")
    })?;
    events += pump_client(&mut client, &tx[..sent], 16, |_, _| Ok(()))?;

    // 7. Transport names and formatting without an allocator.
    let name = SocketName {
        pid: 4242,
        key: 987654,
    };
    let mut line = Line::new();
    write!(line, "{}", name).map_err(|_| "format socket name")?;
    check!(
        SocketName::parse(line.as_str()) == Some(name),
        "socket name"
    );
    let stat = b"77 (dot net) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 9 0 123456 0 0";
    check!(key_from_proc_stat(stat) == Ok(123456), "proc stat");
    check!(
        DiagnosticPorts::parse("/a.sock,nosuspend;;/b.sock").count() == 2,
        "ports"
    );
    let mut line = Line::new();
    write!(line, "{}", ClientError::Misuse(dsipc::UsageError::NotSent))
        .map_err(|_| "format error")?;
    check!(line.len > 0, "error text");

    // 8. A real nettrace stream (the first blocks of a .NET 8 trace, up to its first event
    //    block, closed with the end marker: the `nettrace` fuzz seed without its 2-byte
    //    prefix), fed 1000 bytes at a time through a 40 KiB receive buffer; payloads walked
    //    and CLR events decoded.
    events += nettrace()?;

    #[cfg(feature = "defmt")]
    defmt::error!(
        "nostd-check: {} events, advertise {}, last hresult {}",
        events,
        adv,
        hresult
    );
    Ok(events)
}

static NETTRACE: &[u8] = include_bytes!("../../fuzz/corpus-seeds/nettrace/net8.0.4-first-blocks");

fn nettrace() -> Result<usize, Step> {
    use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider};
    use dsipc::nettrace::{Item, MetadataRecord, NettraceParser};
    let data = &NETTRACE[2..];
    let mut p = NettraceParser::with_max_block_size(40 * 1024);
    let mut storage = [0u8; 40 * 1024 + 512];
    let mut buf = RecvBuffer::new(&mut storage[..]);
    let mut metas: [Option<MetadataRecord<'static>>; 64] = [None; 64];
    let mut fed = 0usize;
    let (mut items, mut events, mut fields, mut decoded, mut ptr) =
        (0usize, 0usize, 0usize, 0usize, 0u8);
    let mut done = false;
    loop {
        let item = match buf.poll_nettrace(&mut p) {
            Ok(Poll::Event(item)) => item,
            Ok(Poll::NeedInput) | Ok(Poll::End) if fed < data.len() => {
                let n = 1000.min(data.len() - fed);
                fed += buf
                    .push(&data[fed..fed + n])
                    .map_err(|_| "nettrace buffer")?;
                continue;
            }
            Ok(Poll::NeedInput) => {
                buf.eof();
                continue;
            }
            Ok(Poll::End) => break,
            Err(RecvError::BufferTooSmall(_)) => return Err("nettrace needs more than its buffer"),
            Err(_) => return Err("nettrace error"),
        };
        items += 1;
        match item {
            Item::Trace(t) => ptr = t.pointer_size,
            Item::Metadata(m) => {
                // Keep a record that outlives the receive buffer: re-parse the
                // same bytes of the static stream.
                let raw = find(data, m.raw).ok_or("metadata bytes")?;
                let rec = MetadataRecord::parse(raw, m.format, 0).map_err(|_| "reparse")?;
                let slot = metas.get_mut(m.metadata_id as usize).ok_or("metadata id")?;
                *slot = Some(rec);
            }
            Item::Event(e) => {
                events += 1;
                let m = metas
                    .get(e.metadata_id as usize)
                    .and_then(|m| m.as_ref())
                    .ok_or("undefined metadata")?;
                for f in m.fields.walk(e.payload) {
                    f.map_err(|_| "field walk")?;
                    fields += 1;
                }
                if ClrProvider::from_name(&m.provider_name).is_some() {
                    let ev = clr::decode_with(m, ptr, e.payload).map_err(|_| "clr decode")?;
                    if !matches!(ev, ClrEvent::Unknown(_)) {
                        decoded += 1;
                    }
                }
            }
            Item::EndOfStream => done = true,
            _ => {}
        }
    }
    p.handle_eof().map_err(|_| "nettrace eof")?;
    check!(done && ptr == 8, "nettrace end marker");
    check!(events > 0, "nettrace events");
    check!(decoded > 0, "nettrace CLR decoding");
    // The self-described events (ProcessInfo) come later in the trace: walking found none.
    check!(fields == 0, "nettrace fields");
    Ok(items)
}

/// The sub-slice of `hay` equal to `needle` (metadata bytes are unique in the stream).
fn find<'a>(hay: &'a [u8], needle: &[u8]) -> Option<&'a [u8]> {
    if needle.is_empty() {
        return Some(&hay[..0]);
    }
    hay.windows(needle.len()).find(|w| *w == needle)
}
