//! Large continuations over a real named pipe: a 64 MiB EventPipe stream and a large
//! ProcessEnvironment block, both checked byte for byte, and a reply written just before
//! the server closes without waiting for the client to read it.
#![cfg(windows)]

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use dsipc::conn::ServerConnection;
use dsipc::fixtures;
use dsipc::payload::{ProcessInfoReply, Reply, Response};
use dsipc_std::windows::PipeListener;
use dsipc_std::{DiagnosticsClient, Endpoint};
use dsipc_testkit::{check_pattern, StreamSpec};
use dsipc_windows_tests::{fake_config, listen, pipe_path, unique_pipe_name};

const MIB: u64 = 1024 * 1024;

#[test]
fn a_64_mib_eventpipe_stream_arrives_whole() {
    let path = pipe_path(&unique_pipe_name("stream64"));
    let config = fake_config().stream(StreamSpec::bytes(64 * MIB));
    let fake = listen(Path::new(&path), config).unwrap();
    let client = DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(Duration::from_secs(30));
    let providers = [fixtures::RUNTIME_PROVIDER];
    let t = Instant::now();
    let mut session = client.collect_tracing(&providers, 256, true).unwrap();
    let mut offset = 0u64;
    let mut bad = None;
    let n = session
        .drain(
            |data| {
                if bad.is_none() {
                    bad = check_pattern(offset, data).map(|i| offset + i as u64);
                }
                offset += data.len() as u64;
                Ok(())
            },
            |_| false,
        )
        .unwrap()
        .bytes();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(bad, None, "first wrong byte");
    assert_eq!(n, 64 * MIB);
    assert_eq!(session.bytes_received(), 64 * MIB);
    let streams = fake.wait_streams(1, Duration::from_secs(30));
    assert_eq!(streams.len(), 1);
    assert_eq!(streams[0].bytes, 64 * MIB);
    eprintln!("64 MiB stream in {:.2} s ({:.0} MiB/s)", secs, 64.0 / secs);
}

#[test]
fn a_large_environment_block_arrives_whole() {
    let path = pipe_path(&unique_pipe_name("env"));
    let mut config = fake_config();
    config.environment = (0..2000)
        .map(|i| format!("VAR_{}={}", i, "v".repeat(i % 300)))
        .collect();
    // One variable larger than one message (a Windows variable may be 32 KiB UTF-16 units).
    config
        .environment
        .push(format!("BIG={}", "x".repeat(32_000)));
    let expected = config.environment.clone();
    let _fake = listen(Path::new(&path), config).unwrap();
    let client = DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(Duration::from_secs(10));
    assert_eq!(client.process_environment().unwrap(), expected);
}

#[test]
fn a_reply_written_right_before_the_server_closes_is_not_lost() {
    // The server writes the reply and closes at once, without FlushFileBuffers: what the
    // client reads must still be the whole reply, then EOF.
    let path = pipe_path(&unique_pipe_name("close"));
    let mut listener = PipeListener::bind(Path::new(&path)).unwrap();
    let server = std::thread::spawn(move || {
        for _ in 0..20 {
            let mut s = listener.accept().unwrap();
            let mut machine = ServerConnection::new();
            let mut req = [0u8; 64];
            let mut got = 0;
            loop {
                let n = std::io::Read::read(&mut s, &mut req[got..]).unwrap();
                got += n;
                if n == 0 || got >= 20 {
                    break;
                }
            }
            let h = machine.handle_input(&req[..got]);
            assert_eq!(h.consumed, 20);
            let mut out = [0u8; 512];
            let command_line = "x".repeat(100);
            // The fixture's process with a 100-character command line.
            let reply = Response::Ok(Reply::ProcessInfo(ProcessInfoReply {
                command_line: command_line.as_str().into(),
                ..fixtures::PROCESS_INFO2.as_process_info()
            }));
            let n = machine.send_response(&reply, &mut out).unwrap();
            s.write_all(&out[..n]).unwrap();
            drop(s); // no FlushFileBuffers, no DisconnectNamedPipe
        }
    });
    let client = DiagnosticsClient::new(Endpoint::new(&path)).with_timeout(Duration::from_secs(10));
    for _ in 0..20 {
        let info = client.process_info_basic().unwrap();
        assert_eq!(info.pid, fixtures::PROCESS_INFO2.process_id);
        assert_eq!(info.command_line.len(), 100);
    }
    server.join().unwrap();
}
