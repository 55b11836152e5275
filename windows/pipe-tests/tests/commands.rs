//! Every command over real named pipes: dsipc-std's `DiagnosticsClient` (the core's client
//! machine through the adapter's overlapped pipe transport) against the fake runtime (the
//! core's server machine), including error replies, version fallbacks, EventPipe sessions
//! of every CollectTracing version stopped from a second connection, and rejections.
#![cfg(windows)]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::payload::{DumpType, PerfMapType};
use dsipc::wire::{Command, Guid, Hresult, Text};
use dsipc::AnyRequest;
use dsipc_std::{DiagnosticsClient, Endpoint, Error};
use dsipc_testkit::{check_pattern, Answer, Config, FakeRuntime, StreamSpec};
use dsipc_windows_tests::{
    commands, fake_config, listen, pipe_path, rejected, unique_pipe_name, COOKIE,
};

const TIMEOUT: Duration = Duration::from_secs(10);

fn start(tag: &str, config: Config) -> (FakeRuntime, DiagnosticsClient) {
    let path = pipe_path(&unique_pipe_name(tag));
    let fake = listen(std::path::Path::new(&path), config).expect("create the pipe");
    let client = DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(TIMEOUT);
    (fake, client)
}

fn text(t: &Text<'_>) -> String {
    t.chars_lossy().collect()
}

#[test]
fn process_commands() {
    let (fake, client) = start("process", fake_config());
    let info = client.process_info().unwrap();
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.pid, 4242);
    assert_eq!(info.cookie, COOKIE);
    assert_eq!(info.command_line, r"C:\app\App.exe --serve");
    assert_eq!(info.os, "Windows");
    assert_eq!(info.runtime_identifier.as_deref(), Some("win-x64"));
    let basic = client.process_info_basic().unwrap();
    assert_eq!(basic.command, Command::ProcessInfo);
    assert_eq!(basic.clr_version, None);

    let env = client.process_environment().unwrap();
    assert_eq!(env, vec!["PATH=C:\\Windows", "DOTNET_gcServer=1"]);

    client
        .set_environment_variable("DIAG_VAR", Some("a=b"))
        .unwrap();
    client.set_environment_variable("DIAG_VAR", None).unwrap();
    client.resume_runtime().unwrap();
    assert!(fake.is_resumed());
    client.enable_perf_map(PerfMapType::JitDump).unwrap();
    client.disable_perf_map().unwrap();
    client.apply_startup_hook(r"C:\hooks\Hook.dll").unwrap();

    let got = fake.received();
    let commands = commands(&fake);
    assert_eq!(
        commands,
        vec![
            Command::ProcessInfo3,
            Command::ProcessInfo,
            Command::ProcessEnvironment,
            Command::SetEnvironmentVariable,
            Command::SetEnvironmentVariable,
            Command::ResumeRuntime,
            Command::EnablePerfMap,
            Command::DisablePerfMap,
            Command::ApplyStartupHook,
        ]
    );
    match got[3].request().unwrap() {
        AnyRequest::SetEnvironmentVariable(s) => {
            assert_eq!(text(&s.name), "DIAG_VAR");
            assert_eq!(text(&s.value), "a=b");
        }
        other => panic!("{:?}", other),
    }
    match got[4].request().unwrap() {
        AnyRequest::SetEnvironmentVariable(s) => assert!(s.value.is_null()),
        other => panic!("{:?}", other),
    }
    match got[6].request().unwrap() {
        AnyRequest::EnablePerfMap(p) => assert_eq!(p.perf_map_type, PerfMapType::JitDump),
        other => panic!("{:?}", other),
    }
    match got[8].request().unwrap() {
        AnyRequest::ApplyStartupHook(h) => {
            assert_eq!(text(&h.startup_hook_path), r"C:\hooks\Hook.dll")
        }
        other => panic!("{:?}", other),
    }
}

#[test]
fn process_info_falls_back_to_older_versions() {
    let config = fake_config()
        .answer(
            Command::ProcessInfo3,
            Answer::Error(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND),
        )
        .answer(
            Command::ProcessInfo2,
            Answer::Error(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND),
        );
    let (fake, client) = start("fallback", config);
    let info = client.process_info().unwrap();
    assert_eq!(info.command, Command::ProcessInfo);
    let commands = commands(&fake);
    assert_eq!(
        commands,
        vec![
            Command::ProcessInfo3,
            Command::ProcessInfo2,
            Command::ProcessInfo
        ]
    );
    fake.set_answer(
        Command::ProcessInfo,
        Answer::Error(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND),
    );
    match client.process_info() {
        Err(e) => assert!(e.is_not_supported(), "{}", e),
        Ok(i) => panic!("{:?}", i),
    }
}

#[test]
fn dump_and_profiler_commands() {
    let (fake, client) = start("dump", fake_config());
    client
        .write_dump(r"C:\dumps\app.dmp", DumpType::WithHeap, 0x4)
        .unwrap();
    let clsid = Guid::from_fields(0xcafe, 1, 2, [9; 8]);
    client
        .attach_profiler(Duration::from_secs(5), clsid, r"C:\p\prof.dll", b"data")
        .unwrap();
    client
        .set_startup_profiler(clsid, r"C:\p\prof.dll")
        .unwrap();
    let got = fake.received();
    match got[0].request().unwrap() {
        AnyRequest::GenerateCoreDump3(d) => {
            assert_eq!(text(&d.dump_name), r"C:\dumps\app.dmp");
            assert_eq!(d.dump_type, DumpType::WithHeap);
            assert_eq!(d.flags, 0x4);
        }
        other => panic!("{:?}", other),
    }
    match got[1].request().unwrap() {
        AnyRequest::AttachProfiler(a) => {
            assert_eq!(a.attach_timeout, 5);
            assert_eq!(a.profiler_guid, clsid);
            assert_eq!(a.client_data, b"data");
        }
        other => panic!("{:?}", other),
    }
    assert_eq!(got[2].command, Some(Command::StartupProfiler));

    // GenerateCoreDump3's error with createdump's message; then the fallback to 2 and 1.
    fake.set_answer(
        Command::GenerateCoreDump3,
        Answer::ErrorWithMessage(Hresult::E_FAIL, "[createdump] no\nspace".into()),
    );
    match client.write_dump(r"C:\x.dmp", DumpType::Full, 0) {
        Err(Error::ErrorReply {
            command,
            hresult,
            message,
        }) => {
            assert_eq!(command, Command::GenerateCoreDump3);
            assert_eq!(hresult, Hresult::E_FAIL);
            assert_eq!(message.as_deref(), Some("[createdump] no\nspace"));
        }
        other => panic!("{:?}", other),
    }
    let unknown = Answer::Error(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND);
    fake.set_answer(Command::GenerateCoreDump3, unknown.clone());
    fake.set_answer(Command::GenerateCoreDump2, unknown);
    client.write_dump(r"C:\y.dmp", DumpType::Triage, 1).unwrap();
    let commands = commands(&fake);
    assert_eq!(
        &commands[commands.len() - 3..],
        &[
            Command::GenerateCoreDump3,
            Command::GenerateCoreDump2,
            Command::GenerateCoreDump
        ]
    );
    // An error reply to a status command.
    fake.set_answer(
        Command::AttachProfiler,
        Answer::Error(Hresult::E_INVALIDARG),
    );
    match client.attach_profiler(Duration::from_secs(1), clsid, "x", &[]) {
        Err(e) => assert_eq!(e.hresult(), Some(Hresult::E_INVALIDARG)),
        Ok(()) => panic!("AttachProfiler should fail"),
    }
}

/// Drains a session until `stop_after` bytes, then stops it from a second connection and
/// drains the rest; checks the pattern.
fn drain_and_stop<'a, R: Into<dsipc::AnyRequest<'a>>>(
    client: &DiagnosticsClient,
    request: R,
    stop_after: u64,
) -> u64 {
    let mut session = client.start_tracing(request).expect("session starts");
    let mut offset = 0u64;
    let n = session
        .drain(
            |data| {
                assert!(
                    check_pattern(offset, data).is_none(),
                    "wrong bytes after {}",
                    offset
                );
                offset += data.len() as u64;
                Ok(())
            },
            |bytes| bytes >= stop_after,
        )
        .expect("drain to a clean end")
        .bytes();
    assert_eq!(n, offset);
    n
}

#[test]
fn eventpipe_sessions_of_every_version_stop_from_a_second_connection() {
    let mut config = fake_config();
    config.stream = StreamSpec::default(); // until StopTracing
    let (fake, client) = start("eventpipe", config);
    let providers = [fixtures::RUNTIME_PROVIDER];
    let t = Instant::now();
    let n = drain_and_stop(
        &client,
        fixtures::request_for(Command::CollectTracing).unwrap(),
        256 * 1024,
    );
    assert!(n >= 256 * 1024);
    let mut total = n;
    for (i, request) in [
        Command::CollectTracing3,
        Command::CollectTracing4,
        Command::CollectTracing5,
        Command::CollectTracing6,
    ]
    .map(|c| fixtures::request_for(c).unwrap())
    .into_iter()
    .enumerate()
    {
        total += drain_and_stop(&client, request, 64 * 1024 * (i as u64 + 1));
    }
    // CollectTracing2 through the convenience method, stopped by a StopHandle.
    let mut s = client.collect_tracing(&providers, 16, false).unwrap();
    let handle = s.stop_handle();
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        handle.stop()
    });
    total += s.drain(|_| Ok(()), |_| false).unwrap().bytes();
    stopper.join().unwrap().unwrap();
    eprintln!(
        "six sessions, {} bytes in {:.2} s",
        total,
        t.elapsed().as_secs_f64()
    );

    let commands = commands(&fake);
    assert_eq!(
        commands
            .iter()
            .filter(|c| **c == Command::StopTracing)
            .count(),
        6
    );
    for c in [
        Command::CollectTracing,
        Command::CollectTracing2,
        Command::CollectTracing3,
        Command::CollectTracing4,
        Command::CollectTracing5,
        Command::CollectTracing6,
    ] {
        assert!(commands.contains(&c), "{:?} missing from {:?}", c, commands);
    }
    // StopTracing of an unknown session: the runtime echoes the id.
    client.stop_tracing(0x1234).unwrap();
}

#[test]
fn rejections_come_back_as_error_replies() {
    let (fake, _client) = start("reject", fake_config());
    // A header with an unknown command set, by hand.
    let mut pipe =
        dsipc_std::windows::connect(fake.socket_path().unwrap(), TIMEOUT).expect("connect");
    let mut msg = Vec::new();
    msg.extend_from_slice(b"DOTNET_IPC_V1\0");
    msg.extend_from_slice(&20u16.to_le_bytes());
    msg.extend_from_slice(&[0x06, 0x00, 0x00, 0x00]);
    pipe.write_all(&msg).unwrap();
    let mut reply = Vec::new();
    pipe.read_to_end(&mut reply).unwrap();
    assert_eq!(reply.len(), 24);
    assert_eq!(&reply[16..18], &[0xff, 0xff]);
    assert_eq!(
        u32::from_le_bytes([reply[20], reply[21], reply[22], reply[23]]),
        0x8013_1385
    );
    assert_eq!(rejected(&fake), 1);
}
