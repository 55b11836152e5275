//! Shared test helpers: the crate's sample requests and responses (`dsipc::fixtures`), an
//! owned event log that is independent of chunking, and a driver that feeds a client machine
//! in chunks.
#![allow(dead_code)]

use dsipc::payload::*;
use dsipc::recv::{Poll, RecvBuffer, RecvError};
use dsipc::{ClientConnection, ClientError, ClientEvent};

// One value of every request type and every response shape: the crate's fixtures.
#[allow(unused_imports)]
pub use dsipc::fixtures::{each_request, each_response};

/// The UTF-16 command line (with a lone surrogate) of [`each_response`]'s ProcessInfo reply.
pub fn lone_surrogate_command_line() -> Vec<u8> {
    dsipc::fixtures::LONE_SURROGATE_COMMAND_LINE.to_vec()
}

/// [`each_response`], for callers that prepared the command line (which it no longer needs:
/// kept for dsipc-mio's tests, which include this module).
pub fn each_response_with(
    _lone: &[u8],
    f: impl FnMut(dsipc::Command, dsipc::payload::Response<'_>),
) {
    each_response(f)
}

/// What a client machine reported, owned and independent of how the input was chunked:
/// stream bytes are concatenated, everything else is kept as its Debug text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Log {
    /// Non-stream events, in order.
    pub events: Vec<String>,
    /// All StreamData bytes, concatenated.
    pub stream: Vec<u8>,
    /// The error that ended the exchange, if any.
    pub error: Option<ClientError>,
}

fn record(log: &mut Log, ev: ClientEvent<'_>) {
    match ev {
        ClientEvent::StreamData(d) => log.stream.extend_from_slice(d),
        other => log.events.push(format!("{:?}", other)),
    }
}

/// Sends `request` on a fresh machine, then feeds `input` in chunks whose sizes come from
/// `chunk` (called with the remaining length) through the core's receive buffer, the way an
/// adapter does. Ends with EOF when `eof` is set.
pub fn drive<R: Request + ?Sized>(
    request: &R,
    input: &[u8],
    mut chunk: impl FnMut(usize) -> usize,
    eof: bool,
) -> Log {
    let mut conn = ClientConnection::new();
    let mut tx = vec![0u8; 70_000];
    let mut log = Log::default();
    if let Err(e) = conn.send_request(request, &mut tx) {
        log.error = Some(e);
        return log;
    }
    // Bigger than any environment entry the tests send; it grows from nothing.
    let mut rx = RecvBuffer::with_limit(Growing(Vec::new()), 1 << 21);
    let (mut fed, mut ended) = (0, false);
    loop {
        match rx.poll_client(&mut conn) {
            Ok(Poll::Event(ev)) => record(&mut log, ev),
            // After the end too: more bytes are the machine's to judge.
            Ok(Poll::NeedInput) | Ok(Poll::End) if fed < input.len() => {
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                let n = rx.push(&input[fed..fed + n]).unwrap();
                fed += n;
            }
            // All fed: EOF once, if asked for (the machine ends or fails then).
            Ok(Poll::NeedInput) if eof && !ended => {
                ended = true;
                rx.eof();
            }
            Ok(_) => return log,
            Err(RecvError::Machine(e)) => {
                log.error = Some(e);
                return log;
            }
            Err(e) => panic!("{}", e),
        }
    }
}

/// Input that makes one exchange: the encoded response, then `tail`.
pub fn exchange_inputs() -> Vec<(AnyRequestOwned, Vec<u8>)> {
    let mut v = Vec::new();
    each_response(|command, resp| {
        let mut buf = vec![0u8; resp.encoded_len()];
        resp.encode(&mut buf).unwrap();
        if let Response::Ok(Reply::ProcessEnvironment(_)) = resp {
            buf.extend_from_slice(&0u32.to_le_bytes());
        }
        v.push((AnyRequestOwned(command), buf));
    });
    for rt in RUNTIMES {
        for case in ["collect-tracing2", "collect-tracing", "process-info"] {
            let mut input = capture(rt, &format!("{}.reply.bin", case));
            if case != "process-info" {
                input.extend(capture(rt, &format!("{}.stream-head.bin", case)));
            }
            let command = if case == "process-info" {
                dsipc::Command::ProcessInfo
            } else {
                dsipc::Command::CollectTracing2
            };
            v.push((AnyRequestOwned(command), input));
        }
    }
    v.push((
        AnyRequestOwned(dsipc::Command::ProcessEnvironment),
        capture("net8.0.4", "process-environment.reply.bin"),
    ));
    v.push((
        AnyRequestOwned(dsipc::Command::ProcessInfo3),
        capture("net8.0.4", "process-info3.reply.bin"),
    ));
    v.push((
        AnyRequestOwned(dsipc::Command::GenerateCoreDump3),
        capture("net8.0.4", "generate-core-dump3-bad-dir.reply.bin"),
    ));
    v
}

/// A request that only names a command (the machine types the reply after it).
pub struct AnyRequestOwned(pub dsipc::Command);
impl Request for AnyRequestOwned {
    fn command(&self) -> dsipc::Command {
        self.0
    }
    fn payload_len(&self) -> usize {
        0
    }
    fn write_payload(&self, _: &mut dsipc::wire::Writer<'_>) {}
}

/// A tiny deterministic PRNG (xorshift64*), so tests need no extra crates.
pub struct Rng(pub u64);

impl Rng {
    /// Next value.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `1..=max`.
    pub fn below(&mut self, max: usize) -> usize {
        1 + (self.next() % max.max(1) as u64) as usize
    }
}

/// Reads a capture file.
pub fn capture(runtime: &str, name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/data/captures/{}/{}",
        env!("CARGO_MANIFEST_DIR"),
        runtime,
        name
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path, e))
}

/// Both captured runtimes.
pub const RUNTIMES: [&str; 2] = ["net8.0.4", "netcore3.1.23"];
pub mod nettrace;
pub use nettrace::Growing;
