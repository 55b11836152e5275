//! Shared test helpers: a sample of every request and response, an owned event log that
//! is independent of chunking, and a driver that feeds a client machine in chunks.
#![allow(dead_code)]

use dsipc::payload::*;
use dsipc::recv::{Poll, RecvBuffer, RecvError};
use dsipc::wire::{Guid, Hresult, Seq, Text, Utf16Str};
use dsipc::{ClientConnection, ClientError, ClientEvent};

/// Calls `f` with one value of every request type (several for the richer ones).
pub fn each_request(mut f: impl FnMut(AnyRequest<'_>)) {
    let providers = [
        Provider::new("Microsoft-Windows-DotNETRuntime", 0x14C14FCCBD, 4),
        Provider {
            keywords: u64::MAX,
            log_level: 5,
            provider_name: Text::Str("Microsoft-DotNETCore-SampleProfiler"),
            arguments: Text::Str("EventCounterIntervalSec=1;é€𝄞"),
        },
        Provider {
            keywords: 0,
            log_level: 0,
            provider_name: Text::Str("System.Runtime"),
            arguments: Text::Str(""),
        },
    ];
    let ids = [1u32, 2, 3, 0xFFFF_FFFF];
    let streaming = [
        StreamingProvider {
            provider: providers[0],
            filter: EventFilter::default(),
        },
        StreamingProvider {
            provider: providers[1],
            filter: EventFilter {
                enable: true,
                event_ids: Seq::Slice(&ids),
            },
        },
    ];
    let sets = [TracepointSet {
        tracepoint_name: Text::Str("LowEvents"),
        event_ids: Seq::Slice(&ids[..3]),
    }];
    let user_events = [
        UserEventsProvider {
            provider: providers[0],
            filter: EventFilter::default(),
            tracepoint_config: TracepointConfig {
                default_tracepoint_name: Text::Str("MyTracepoint"),
                tracepoints: Seq::EMPTY,
            },
        },
        UserEventsProvider {
            provider: providers[2],
            filter: EventFilter {
                enable: false,
                event_ids: Seq::Slice(&ids[2..]),
            },
            tracepoint_config: TracepointConfig {
                default_tracepoint_name: Text::Null,
                tracepoints: Seq::Slice(&sets),
            },
        },
    ];
    let session = StreamingSession {
        circular_buffer_mb: 256,
        format: TraceFormat::NetTrace,
        rundown_keyword: 0x8002_0139,
        request_stackwalk: true,
        providers: Seq::Slice(&streaming),
    };
    let ue = UserEventsSession {
        rundown_keyword: 0,
        providers: Seq::Slice(&user_events),
    };
    let clsid = Guid::parse("12345678-1234-5678-9abc-def012345678").unwrap();
    let reqs: [AnyRequest<'_>; 27] = [
        GenerateCoreDump {
            dump_name: "/tmp/dump.%p".into(),
            dump_type: DumpType::Normal,
            diagnostics: 0,
        }
        .into(),
        GenerateCoreDump2 {
            dump_name: "".into(),
            dump_type: DumpType::Full,
            flags: 0x5,
        }
        .into(),
        GenerateCoreDump3 {
            dump_name: "/tmp/ünïcode dump".into(),
            dump_type: DumpType::Triage,
            flags: 0,
        }
        .into(),
        StopTracing {
            session_id: 0x0000_7f9e_b000_10c0,
        }
        .into(),
        CollectTracing {
            circular_buffer_mb: 250,
            format: TraceFormat::NetTrace,
            providers: Seq::Slice(&providers[..1]),
        }
        .into(),
        CollectTracing2 {
            circular_buffer_mb: 256,
            format: TraceFormat::NetPerf,
            request_rundown: false,
            providers: Seq::Slice(&providers),
        }
        .into(),
        CollectTracing3 {
            circular_buffer_mb: 1,
            format: TraceFormat::NetTrace,
            request_rundown: true,
            request_stackwalk: false,
            providers: Seq::Slice(&providers[1..]),
        }
        .into(),
        CollectTracing4 {
            circular_buffer_mb: 64,
            format: TraceFormat::NetTrace,
            rundown_keyword: 0,
            request_stackwalk: true,
            providers: Seq::Slice(&providers),
        }
        .into(),
        CollectTracing5::Streaming(session).into(),
        CollectTracing5::UserEvents(ue).into(),
        CollectTracing6::Streaming {
            session,
            buffering_mode: BufferingMode::Block,
        }
        .into(),
        CollectTracing6::UserEvents(ue).into(),
        AttachProfiler {
            attach_timeout: 5,
            profiler_guid: clsid,
            profiler_path: "/opt/profiler/libprof.so".into(),
            client_data: b"abcd",
        }
        .into(),
        AttachProfiler {
            attach_timeout: 0,
            profiler_guid: Guid::NIL,
            profiler_path: "p".into(),
            client_data: &[],
        }
        .into(),
        StartupProfiler {
            profiler_guid: clsid,
            profiler_path: "/opt/profiler/libprof.so".into(),
        }
        .into(),
        ProcessInfo.into(),
        ResumeRuntime.into(),
        ProcessEnvironment.into(),
        SetEnvironmentVariable {
            name: "DIAG_VAR".into(),
            value: "hello=world".into(),
        }
        .into(),
        SetEnvironmentVariable {
            name: "DIAG_VAR".into(),
            value: Text::Null,
        }
        .into(),
        SetEnvironmentVariable {
            name: "EMPTY".into(),
            value: "".into(),
        }
        .into(),
        ProcessInfo2.into(),
        EnablePerfMap {
            perf_map_type: PerfMapType::PerfMap,
        }
        .into(),
        EnablePerfMap {
            perf_map_type: PerfMapType::All,
        }
        .into(),
        DisablePerfMap.into(),
        ApplyStartupHook {
            startup_hook_path: "/app/Hook.dll".into(),
        }
        .into(),
        ProcessInfo3.into(),
    ];
    for r in reqs {
        f(r);
    }
}

/// UTF-16LE bytes of `s`, plus one lone surrogate when `lone` is set.
pub fn utf16_bytes(s: &str, lone: bool) -> Vec<u8> {
    let mut v: Vec<u8> = s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect();
    if lone {
        v.extend_from_slice(&0xDC00u16.to_le_bytes());
    }
    v
}

/// The UTF-16 command line (with a lone surrogate) used by [`each_response`].
pub fn lone_surrogate_command_line() -> Vec<u8> {
    utf16_bytes("/usr/bin/app \u{1F600} arg", true)
}

/// Calls `f` with `(request command, response)` for every response shape.
pub fn each_response(f: impl FnMut(dsipc::Command, Response<'_>)) {
    each_response_with(&lone_surrogate_command_line(), f)
}

/// [`each_response`] with the command line bytes prepared by the caller.
pub fn each_response_with(lone: &[u8], mut f: impl FnMut(dsipc::Command, Response<'_>)) {
    use dsipc::Command as C;
    let cookie = Guid::parse("c3543ae5-872a-40f1-a361-c171847563b0").unwrap();
    let info = ProcessInfoReply {
        process_id: 12814,
        runtime_cookie: cookie,
        command_line: Text::Utf16(Utf16Str::from_le_bytes_unchecked(lone)),
        os: "Linux".into(),
        arch: "x64".into(),
    };
    let info2 = ProcessInfo2Reply {
        process_id: 1,
        runtime_cookie: cookie,
        command_line: "dotnet app.dll".into(),
        os: "Linux".into(),
        arch: "arm64".into(),
        managed_entrypoint_assembly_name: "".into(),
        clr_product_version: "8.0.4".into(),
    };
    let info3 = ProcessInfo3Reply {
        version: 1,
        process_id: u64::MAX,
        runtime_cookie: cookie,
        command_line: Text::Null,
        os: "Linux".into(),
        arch: "x64".into(),
        managed_entrypoint_assembly_name: "App".into(),
        clr_product_version: "8.0.4".into(),
        runtime_identifier: "linux-x64".into(),
        extension: &[],
    };
    let info3v2 = ProcessInfo3Reply {
        version: 2,
        extension: &[1, 2, 3],
        ..info3
    };
    let cases: [(C, Response<'_>); 12] = [
        (C::ResumeRuntime, Response::Ok(Reply::Ok(Hresult::S_OK))),
        (
            C::EnablePerfMap,
            Response::Ok(Reply::Ok(Hresult::E_INVALIDARG)),
        ),
        (
            C::CollectTracing2,
            Response::Ok(Reply::SessionId(0x7f9e_b000_10c0)),
        ),
        (C::StopTracing, Response::Ok(Reply::SessionId(0))),
        (C::ProcessInfo, Response::Ok(Reply::ProcessInfo(info))),
        (C::ProcessInfo2, Response::Ok(Reply::ProcessInfo2(info2))),
        (C::ProcessInfo3, Response::Ok(Reply::ProcessInfo3(info3))),
        (C::ProcessInfo3, Response::Ok(Reply::ProcessInfo3(info3v2))),
        (
            C::ProcessEnvironment,
            Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
                incoming_bytes: 4,
                future: 0,
            })),
        ),
        (
            C::ProcessInfo,
            Response::Error(ErrorReply::new(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND)),
        ),
        (
            C::GenerateCoreDump3,
            Response::Error(ErrorReply {
                hresult: Hresult::E_FAIL,
                message: Some("[createdump] Could not create output file\n".into()),
            }),
        ),
        (
            C::GenerateCoreDump3,
            Response::Error(ErrorReply {
                hresult: Hresult::E_FAIL,
                message: Some(Text::Null),
            }),
        ),
    ];
    for (c, r) in cases {
        f(c, r);
    }
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
