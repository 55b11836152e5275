//! The session layer against an in-memory runtime: version fallbacks, replies judged,
//! deadlines from fake time, EventPipe sessions stopped from a second connection and how
//! their streams end; every case at every chunk size.

use dsipc::nettrace::{Framing, NettraceError};
use dsipc::payload::{
    DumpType, ErrorReply, EventFilter, ProcessInfoReply, Provider, Reply, ResumeRuntime,
};
use dsipc::session::{
    Ask, Call, Outcome, ProcessInfo, Rundown, SessionError, Step, TraceConfig, TraceStep, Tracing,
};
use dsipc::wire::{Command, Guid, Hresult, Text};
use dsipc::{AnyRequest, ClientEvent, Response};

const TRACE: &[u8] = include_bytes!("../data/nettrace/activities-net8.0.4.nettrace");

mod tracing;

fn encode(r: Response<'_>) -> Vec<u8> {
    let mut v = vec![0u8; r.encoded_len()];
    let n = r.encode(&mut v).unwrap();
    v.truncate(n);
    v
}

fn unknown() -> Vec<u8> {
    encode(Response::Error(ErrorReply {
        hresult: Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
        message: None,
    }))
}

fn command_of(request: &[u8]) -> Command {
    Command::from_code(request[16], request[17])
}

/// One fake connection: what the runtime sends back, fed `chunk` bytes at a time, then EOF
/// (unless `hold`: the connection stays open and silent).
struct Conn {
    reply: Vec<u8>,
    at: usize,
    hold: bool,
}

/// Drives a call against `runtime` (the commands seen so far and this request → the
/// runtime's bytes and whether it then holds the connection open). Time advances by one
/// millisecond per read that brings nothing.
fn run_call(
    mut call: Call,
    chunk: usize,
    mut runtime: impl FnMut(&[Command], Command) -> (Vec<u8>, bool),
) -> (
    Vec<Command>,
    Result<Option<ProcessInfo>, SessionError>,
    usize,
) {
    let mut seen = Vec::new();
    let mut conn: Option<Conn> = None;
    let mut info = None;
    let mut entries = 0;
    let mut now = 0;
    loop {
        let command = call.command();
        let step = match call.poll(now) {
            Ok(s) => s,
            Err(e) => return (seen, Err(e), entries),
        };
        match step {
            Step::Connect => {
                conn = Some(Conn {
                    reply: Vec::new(),
                    at: 0,
                    hold: false,
                });
                call.connected().unwrap();
            }
            Step::Transmit(bytes) => {
                let c = command_of(bytes);
                let (reply, hold) = runtime(&seen, c);
                seen.push(c);
                let conn = conn.as_mut().unwrap();
                conn.reply = reply;
                conn.hold = hold;
                call.transmitted().unwrap();
            }
            Step::Receive => {
                let conn = conn.as_mut().unwrap();
                let left = conn.reply.len() - conn.at;
                if left == 0 {
                    if conn.hold {
                        now += 1;
                    } else {
                        call.eof();
                    }
                    continue;
                }
                let buf = call.read_buf().unwrap();
                let n = left.min(chunk).min(buf.len());
                buf[..n].copy_from_slice(&conn.reply[conn.at..conn.at + n]);
                conn.at += n;
                call.filled(n);
            }
            Step::Close => conn = None,
            Step::Event(ClientEvent::Reply(r)) => {
                if let Some(i) = ProcessInfo::from_reply(command, &r) {
                    info = Some(i);
                }
            }
            Step::Event(ClientEvent::EnvironmentVariable(_)) => entries += 1,
            Step::Event(_) => {}
            Step::Done => return (seen, Ok(info), entries),
            other => panic!("unexpected step {other:?}"),
        }
    }
}

fn process_info_reply() -> Vec<u8> {
    encode(Response::Ok(Reply::ProcessInfo(ProcessInfoReply {
        process_id: 4242,
        runtime_cookie: Guid::NIL,
        command_line: Text::Str("/usr/bin/dotnet app.dll"),
        os: Text::Str("Linux"),
        arch: Text::Str("x64"),
    })))
}

#[test]
fn process_info_falls_back_from_3_to_2_to_1_on_unknown_command() {
    for chunk in 1..64 {
        let call = Call::new(Ask::ProcessInfo, 0, 1_000).unwrap();
        let (seen, r, _) = run_call(call, chunk, |_, c| match c {
            Command::ProcessInfo => (process_info_reply(), false),
            _ => (unknown(), false),
        });
        assert_eq!(
            seen,
            [
                Command::ProcessInfo3,
                Command::ProcessInfo2,
                Command::ProcessInfo
            ]
        );
        let info = r.unwrap().unwrap();
        assert_eq!((info.pid, info.command), (4242, Command::ProcessInfo));
        assert_eq!(info.command_line, "/usr/bin/dotnet app.dll");
    }
}

#[test]
fn process_info_unknown_everywhere_is_not_supported_as_on_core_3_1() {
    let call = Call::new(Ask::ProcessInfo, 0, 1_000).unwrap();
    let (seen, r, _) = run_call(call, 7, |_, _| (unknown(), false));
    assert_eq!(seen.len(), 3);
    assert_eq!(
        r.unwrap_err(),
        SessionError::NotSupported {
            command: Command::ProcessInfo,
            hresult: Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND
        }
    );
}

#[test]
fn dump_falls_back_to_generate_core_dump_only_when_it_carries_the_flags() {
    let ok = || encode(Response::Ok(Reply::Ok(Hresult::S_OK)));
    let runtime = |_: &[Command], c: Command| match c {
        Command::GenerateCoreDump => (ok(), false),
        _ => (unknown(), false),
    };
    // The call keeps nothing the ask lent it: the path is gone before the call runs.
    let call = |flags| {
        let path = String::from("/tmp/core");
        let ask = Ask::Dump {
            path: &path,
            kind: DumpType::Full,
            flags,
        };
        Call::new(ask, 0, 1_000).unwrap()
    };
    let (seen, r, _) = run_call(call(1), 5, runtime);
    assert_eq!(
        seen,
        [
            Command::GenerateCoreDump3,
            Command::GenerateCoreDump2,
            Command::GenerateCoreDump
        ]
    );
    r.unwrap();
    let (seen, r, _) = run_call(call(4), 5, runtime);
    assert_eq!(seen.len(), 2);
    assert!(matches!(r, Err(SessionError::InvalidArgument(_))), "{r:?}");
}

#[test]
fn status_replies_are_judged_error_replies_and_failure_statuses_typed() {
    let req = AnyRequest::ResumeRuntime(ResumeRuntime);
    let (_, r, _) = run_call(Call::new(Ask::Status(req), 0, 1_000).unwrap(), 3, |_, _| {
        (encode(Response::Ok(Reply::Ok(Hresult(-2147024809)))), false)
    });
    assert!(
        matches!(r, Err(SessionError::ErrorReply { hresult, .. }) if hresult == Hresult(-2147024809))
    );
    let (_, r, _) = run_call(Call::new(Ask::Status(req), 0, 1_000).unwrap(), 3, |_, _| {
        (process_info_reply(), false)
    });
    // A reply of another command's shape does not even decode as a status.
    assert!(matches!(r, Err(SessionError::Protocol(_))), "{r:?}");
}

#[test]
fn a_silent_runtime_times_out_at_the_deadline_on_fake_time() {
    let call = Call::new(Ask::ProcessInfo, 100, 50).unwrap();
    assert_eq!(call.poll_timeout(), Some(150));
    let (_, r, _) = run_call(call, 3, |_, _| (Vec::new(), true));
    assert_eq!(
        r.unwrap_err(),
        SessionError::Timeout {
            command: Command::ProcessInfo3,
            timeout_ms: 50
        }
    );
}

#[test]
fn misuse_is_a_typed_error_not_a_panic() {
    let mut call = Call::new(Ask::ProcessInfo, 0, 1_000).unwrap();
    assert!(matches!(call.read_buf(), Err(SessionError::Misuse(_))));
    assert!(matches!(call.transmitted(), Err(SessionError::Misuse(_))));
    // A request real runtimes refuse is refused before any connection.
    let tracing = Tracing::new(TraceConfig::new(&[]), 0, 1_000);
    assert!(matches!(tracing, Err(SessionError::InvalidRequest(_))));
}

fn providers() -> [Provider<'static>; 1] {
    [Provider::new("Microsoft-DotNETCore-SampleProfiler", 0, 5)]
}

#[test]
fn collect_tracing_version_is_the_lowest_the_options_need() {
    let p = providers();
    let base = TraceConfig::new(&p);
    assert_eq!(base.command(), Command::CollectTracing2);
    assert_eq!(
        base.clone().with_stackwalk(false).command(),
        Command::CollectTracing3
    );
    assert_eq!(
        base.clone().with_rundown(Rundown::Keyword(0x8)).command(),
        Command::CollectTracing4
    );
    for same in [Rundown::None, Rundown::Keyword(0), Rundown::Default] {
        assert_eq!(
            base.clone().with_rundown(same).command(),
            Command::CollectTracing2
        );
    }
    let filter = [EventFilter {
        enable: true,
        event_ids: (&[1u32, 2][..]).into(),
    }];
    assert_eq!(
        base.with_event_filters(&filter).command(),
        Command::CollectTracing5
    );
}
