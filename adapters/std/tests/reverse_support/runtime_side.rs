//! The runtime's side of one reverse connection, built on the core's advertising
//! `ServerConnection`: connect, send the Advertise, then (if asked) read one command and
//! answer it. Shared by dsipc-std's monitor test and the CLI's (`cli/tests/monitor.rs`);
//! needs nothing else from the crate root.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use dsipc::payload::{Reply, Response};
use dsipc::wire::{Advertise, Hresult, ADVERTISE_LEN};
use dsipc::{Command, Request, ServerConnection, ServerEvent, ServerStatus};

/// How long the runtime side waits for the monitor's command.
const WAIT: Duration = Duration::from_secs(20);

/// Advertise on a new connection to `port`, then (if `serve`) one command answered OK.
/// Returns the command and, if not served, the still-open stream.
pub fn runtime_connection(
    port: &Path,
    adv: Advertise,
    serve: bool,
) -> (Option<Command>, UnixStream) {
    let ok = Response::Ok(Reply::Ok(Hresult::S_OK));
    runtime_answering(port, adv, if serve { Some(&ok) } else { None })
}

/// Advertise on a new connection to `port`, then (if `answer`) one command answered with
/// it. Returns the command (`None` when not served) and the stream.
pub fn runtime_answering(
    port: &Path,
    adv: Advertise,
    answer: Option<&Response<'_>>,
) -> (Option<Command>, UnixStream) {
    let mut s = UnixStream::connect(port).expect("connect to the monitor");
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut machine = ServerConnection::advertising(adv);
    let mut out = [0u8; 256];
    let n = machine.poll_transmit(&mut out).unwrap();
    assert_eq!(n, ADVERTISE_LEN);
    s.write_all(&out[..n]).unwrap();
    let answer = match answer {
        Some(a) => a,
        None => return (None, s),
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let h = machine.handle_input(&buf);
        match h.status {
            ServerStatus::Event(ServerEvent::Request { request, .. }) => {
                let n = machine.send_response(answer, &mut out).unwrap();
                s.write_all(&out[..n]).unwrap();
                return (Some(request.command()), s);
            }
            ServerStatus::Partial { .. } => {}
            other => panic!("runtime side: {:?}", other),
        }
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "the monitor closed before sending a command");
        buf.extend_from_slice(&chunk[..n]);
    }
}
