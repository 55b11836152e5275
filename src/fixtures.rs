//! Sample requests and replies, shared by the crate's tests, benches, fuzz harness and
//! no_std check (feature `fixtures`, off by default).
//!
//! Everything here is a constant, a static or a function building values on the stack: no
//! allocation, no clock, usable from `#![no_std]` code. The values are valid (they encode)
//! unless a name says otherwise.

use crate::payload::{
    AnyRequest, ApplyStartupHook, AttachProfiler, BufferingMode, CollectTracing, CollectTracing2,
    CollectTracing3, CollectTracing4, CollectTracing5, CollectTracing6, DisablePerfMap, DumpType,
    EnablePerfMap, ErrorReply, EventFilter, GenerateCoreDump, GenerateCoreDump2, GenerateCoreDump3,
    PerfMapType, ProcessEnvironment, ProcessEnvironmentReply, ProcessInfo, ProcessInfo2,
    ProcessInfo2Reply, ProcessInfo3, ProcessInfo3Reply, ProcessInfoReply, Provider, Reply,
    ReplyKind, Request, Response, ResumeRuntime, SetEnvironmentVariable, StartupProfiler,
    StopTracing, StreamingProvider, StreamingSession, TraceFormat, TracepointConfig, TracepointSet,
    UserEventsProvider, UserEventsSession,
};
use crate::wire::{Advertise, Guid, Hresult, Seq, Text, Utf16Str};
use crate::Command;

/// The runtime provider dotnet-trace enables by default (its default keywords, Informational).
pub const RUNTIME_PROVIDER: Provider<'static> = Provider {
    keywords: 0x14C14FCCBD,
    log_level: 4,
    provider_name: Text::Str("Microsoft-Windows-DotNETRuntime"),
    arguments: Text::Null,
};

/// dotnet-trace's default providers plus a counters provider with arguments.
pub const PROVIDERS: [Provider<'static>; 3] = [
    RUNTIME_PROVIDER,
    Provider {
        keywords: 0xF00000000000,
        log_level: 5,
        provider_name: Text::Str("Microsoft-DotNETCore-SampleProfiler"),
        arguments: Text::Null,
    },
    Provider {
        keywords: u64::MAX,
        log_level: 4,
        provider_name: Text::Str("System.Runtime"),
        arguments: Text::Str("EventCounterIntervalSec=1"),
    },
];

/// Providers at the edges: all keywords with non-ASCII arguments, no keywords at level 0
/// with empty arguments.
pub const EDGE_PROVIDERS: [Provider<'static>; 3] = [
    RUNTIME_PROVIDER,
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

/// A CollectTracing2 session over [`PROVIDERS`] (256 MB buffer, rundown requested).
pub const COLLECT_TRACING2: CollectTracing2<'static> = CollectTracing2 {
    circular_buffer_mb: 256,
    format: TraceFormat::NetTrace,
    request_rundown: true,
    providers: Seq::Slice(&PROVIDERS),
};

const STREAMING: [StreamingProvider<'static>; 1] = [StreamingProvider {
    provider: RUNTIME_PROVIDER,
    filter: EventFilter {
        enable: false,
        event_ids: Seq::Slice(&[]),
    },
}];

const USER_EVENTS: [UserEventsProvider<'static>; 1] = [UserEventsProvider {
    provider: RUNTIME_PROVIDER,
    filter: EventFilter {
        enable: false,
        event_ids: Seq::Slice(&[]),
    },
    tracepoint_config: TracepointConfig {
        default_tracepoint_name: Text::Str("dotnet"),
        tracepoints: Seq::Slice(&[TracepointSet {
            tracepoint_name: Text::Str("LowEvents"),
            event_ids: Seq::Slice(&[1, 2, 3]),
        }]),
    },
}];

/// A streaming CollectTracing5/6 session: the runtime provider, 64 MB, stack walks.
pub const STREAMING_SESSION: StreamingSession<'static> = StreamingSession {
    circular_buffer_mb: 64,
    format: TraceFormat::NetTrace,
    rundown_keyword: 0,
    request_stackwalk: true,
    providers: Seq::Slice(&STREAMING),
};

/// A user_events CollectTracing5/6 session: the runtime provider to tracepoint `dotnet`,
/// its events 1 to 3 to `LowEvents` (needs the tracepoint fd passed with the request).
pub const USER_EVENTS_SESSION: UserEventsSession<'static> = UserEventsSession {
    rundown_keyword: 0,
    providers: Seq::Slice(&USER_EVENTS),
};

/// One valid request per request command, both session kinds of CollectTracing5/6 (the
/// user_events ones last). The fuzz `client` target indexes it with its first byte.
pub static REQUESTS: [AnyRequest<'static>; 23] = [
    AnyRequest::GenerateCoreDump(GenerateCoreDump {
        dump_name: Text::Str("/tmp/core.%p"),
        dump_type: DumpType::Normal,
        diagnostics: 0,
    }),
    AnyRequest::GenerateCoreDump2(GenerateCoreDump2 {
        dump_name: Text::Str(""),
        dump_type: DumpType::Full,
        flags: 0,
    }),
    AnyRequest::GenerateCoreDump3(GenerateCoreDump3 {
        dump_name: Text::Str("/nonexistent/x.dmp"),
        dump_type: DumpType::Normal,
        flags: 0,
    }),
    AnyRequest::StopTracing(StopTracing { session_id: 1 }),
    AnyRequest::CollectTracing(CollectTracing {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        providers: Seq::Slice(&TRACING_PROVIDERS),
    }),
    AnyRequest::CollectTracing2(CollectTracing2 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        request_rundown: true,
        providers: Seq::Slice(&TRACING_PROVIDERS),
    }),
    AnyRequest::CollectTracing3(CollectTracing3 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        request_rundown: true,
        request_stackwalk: true,
        providers: Seq::Slice(&TRACING_PROVIDERS),
    }),
    AnyRequest::CollectTracing4(CollectTracing4 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        rundown_keyword: 0x8002_0139,
        request_stackwalk: true,
        providers: Seq::Slice(&TRACING_PROVIDERS),
    }),
    AnyRequest::CollectTracing5(CollectTracing5::Streaming(STREAMING_SESSION)),
    AnyRequest::CollectTracing6(CollectTracing6::Streaming {
        session: STREAMING_SESSION,
        buffering_mode: BufferingMode::Drop,
    }),
    AnyRequest::AttachProfiler(AttachProfiler {
        attach_timeout: 5,
        profiler_guid: Guid::NIL,
        profiler_path: Text::Str("/opt/libprof.so"),
        client_data: b"data",
    }),
    AnyRequest::StartupProfiler(StartupProfiler {
        profiler_guid: Guid::NIL,
        profiler_path: Text::Str("/opt/libprof.so"),
    }),
    AnyRequest::ProcessInfo(ProcessInfo),
    AnyRequest::ResumeRuntime(ResumeRuntime),
    AnyRequest::ProcessEnvironment(ProcessEnvironment),
    AnyRequest::SetEnvironmentVariable(SetEnvironmentVariable {
        name: Text::Str("DIAG"),
        value: Text::Str("1"),
    }),
    AnyRequest::ProcessInfo2(ProcessInfo2),
    AnyRequest::EnablePerfMap(EnablePerfMap {
        perf_map_type: PerfMapType::PerfMap,
    }),
    AnyRequest::DisablePerfMap(DisablePerfMap),
    AnyRequest::ApplyStartupHook(ApplyStartupHook {
        startup_hook_path: Text::Str("/app/Hook.dll"),
    }),
    AnyRequest::ProcessInfo3(ProcessInfo3),
    AnyRequest::CollectTracing5(CollectTracing5::UserEvents(USER_EVENTS_SESSION)),
    AnyRequest::CollectTracing6(CollectTracing6::UserEvents(USER_EVENTS_SESSION)),
];

/// The one provider of the tracing requests in [`REQUESTS`].
const TRACING_PROVIDERS: [Provider<'static>; 1] = [RUNTIME_PROVIDER];

/// The first sample in [`REQUESTS`] for `command` (`None` for a reply or unknown command).
pub fn request_for(command: Command) -> Option<AnyRequest<'static>> {
    REQUESTS.iter().find(|r| r.command() == command).copied()
}

/// Calls `f` with one value of every request type, several for the richer ones (edge values:
/// empty and non-ASCII strings, null texts, every filter and tracepoint shape).
pub fn each_request(mut f: impl FnMut(AnyRequest<'_>)) {
    let providers = &EDGE_PROVIDERS;
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
    let clsid = PROFILER_CLSID;
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
            providers: Seq::Slice(providers),
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
            providers: Seq::Slice(providers),
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

/// The profiler CLSID of the AttachProfiler/StartupProfiler samples of [`each_request`]
/// (`12345678-1234-5678-9abc-def012345678`).
pub const PROFILER_CLSID: Guid = Guid::from_fields(
    0x1234_5678,
    0x1234,
    0x5678,
    [0x9a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78],
);

/// The runtime cookie of [`each_response`]'s ProcessInfo replies
/// (`c3543ae5-872a-40f1-a361-c171847563b0`).
pub const RUNTIME_COOKIE: Guid = Guid::from_fields(
    0xc354_3ae5,
    0x872a,
    0x40f1,
    [0xa3, 0x61, 0xc1, 0x71, 0x84, 0x75, 0x63, 0xb0],
);

/// The UTF-16LE command line `/usr/bin/app 😀 arg` followed by a lone low surrogate (0xDC00),
/// as a runtime may send it (used by [`each_response`]).
pub const LONE_SURROGATE_COMMAND_LINE: [u8; 40] = [
    47, 0, 117, 0, 115, 0, 114, 0, 47, 0, 98, 0, 105, 0, 110, 0, 47, 0, 97, 0, 112, 0, 112, 0, 32,
    0, 0x3D, 0xD8, 0x00, 0xDE, 32, 0, 97, 0, 114, 0, 103, 0, 0x00, 0xDC,
];

/// Calls `f` with `(request command, response)` for every response shape: OK statuses,
/// session ids, ProcessInfo 1/2/3 (v3 with and without extension, a lone surrogate, a null
/// string), a ProcessEnvironment header, error replies with and without message.
pub fn each_response(mut f: impl FnMut(Command, Response<'_>)) {
    use Command as C;
    let cookie = RUNTIME_COOKIE;
    let info = ProcessInfoReply {
        process_id: 12814,
        runtime_cookie: cookie,
        command_line: Text::Utf16(Utf16Str::from_le_bytes_unchecked(
            &LONE_SURROGATE_COMMAND_LINE,
        )),
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

/// The process a fake runtime describes (ProcessInfo2's fields): pid 4242, cookie
/// `07070707-…`, `/usr/bin/dotnet app.dll`, Linux x64, .NET 8.0.4.
pub static PROCESS_INFO2: ProcessInfo2Reply<'static> = ProcessInfo2Reply {
    process_id: 4242,
    runtime_cookie: Guid([7; 16]),
    command_line: Text::Str("/usr/bin/dotnet app.dll"),
    os: Text::Str("Linux"),
    arch: Text::Str("x64"),
    managed_entrypoint_assembly_name: Text::Str("app"),
    clr_product_version: Text::Str("8.0.4"),
};

/// The runtime identifier ProcessInfo3 adds to [`PROCESS_INFO2`].
pub const RUNTIME_IDENTIFIER: &str = "linux-x64";

/// ProcessInfo3's fields for the [`PROCESS_INFO2`] process (payload version 1, with
/// [`RUNTIME_IDENTIFIER`]): what a fake runtime answers every ProcessInfo version from.
pub fn process_info3() -> ProcessInfo3Reply<'static> {
    crate::conn::process_info3_from_v2(&PROCESS_INFO2, Text::Str(RUNTIME_IDENTIFIER))
}

/// The environment a fake runtime sends for ProcessEnvironment.
pub static ENVIRONMENT: [Text<'static>; 3] = [
    Text::Str("PATH=/usr/bin:/bin"),
    Text::Str("HOME=/root"),
    Text::Str("LANG=é€𝄞"),
];

/// The Advertise of the [`PROCESS_INFO2`] process on a reverse port.
pub const ADVERTISE: Advertise = Advertise {
    runtime_cookie: Guid([7; 16]),
    process_id: 4242,
    future: 0,
};

/// The OK response a fake runtime gives to `command`, by reply shape, describing
/// [`PROCESS_INFO2`] (ProcessInfo reports part of it, ProcessInfo3 adds
/// [`RUNTIME_IDENTIFIER`]; ProcessEnvironment announces [`ENVIRONMENT`]).
/// `None` for a command without a reply shape.
pub fn response_for(command: Command) -> Option<Response<'static>> {
    let reply = match ReplyKind::of(command)? {
        ReplyKind::Status => Reply::Ok(Hresult::S_OK),
        ReplyKind::SessionId => Reply::SessionId(0x7f9e_b000_10c0),
        ReplyKind::ProcessInfo => Reply::ProcessInfo(PROCESS_INFO2.as_process_info()),
        ReplyKind::ProcessInfo2 => Reply::ProcessInfo2(PROCESS_INFO2),
        ReplyKind::ProcessInfo3 => Reply::ProcessInfo3(process_info3()),
        ReplyKind::ProcessEnvironment => Reply::ProcessEnvironment(ProcessEnvironmentReply {
            incoming_bytes: crate::conn::environment_block_len(ENVIRONMENT.iter().copied()) as u32,
            future: 0,
        }),
        _ => return None,
    };
    Some(Response::Ok(reply))
}
