//! Golden bytes: the spec's examples and what real .NET 8.0.4 and .NET Core 3.1.23 runtimes
//! sent and received (captured by tests/runtime/capture.py into tests/data/captures/).

mod common;

use common::{capture, drive, Log, RUNTIMES};
use dsipc::payload::*;
use dsipc::wire::{Header, Hresult};
use dsipc::{ClientError, Command};

/// Every request file of both runtimes decodes, and re-encodes to the same bytes.
#[test]
fn captured_requests_decode_and_reencode_identically() {
    let mut checked = 0;
    for rt in RUNTIMES {
        for entry in std::fs::read_dir(format!(
            "{}/tests/data/captures/{}",
            env!("CARGO_MANIFEST_DIR"),
            rt
        ))
        .unwrap()
        {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".request.bin")
                || name.starts_with("bad-")
                || name.starts_with("unknown-")
            {
                continue;
            }
            let bytes = std::fs::read(&path).unwrap();
            let header = Header::parse(&bytes).unwrap();
            assert_eq!(header.size() as usize, bytes.len(), "{}", name);
            let req = AnyRequest::decode(header.command(), &bytes[20..])
                .unwrap_or_else(|e| panic!("{}: {}", name, e))
                .unwrap_or_else(|| panic!("{}: unknown command", name));
            let mut out = vec![0u8; bytes.len()];
            let n = req.encode(&mut out).unwrap();
            assert_eq!(&out[..n], &bytes[..], "{}", name);
            checked += 1;
        }
    }
    assert!(checked >= 25, "only {} request captures", checked);
}

fn reply_log(rt: &str, case: &str, eof: bool) -> Log {
    let req_bytes = capture(rt, &format!("{}.request.bin", case));
    let header = dsipc::wire::HeaderView::ref_from(&req_bytes).unwrap();
    let command = header.command();
    let mut input = capture(rt, &format!("{}.reply.bin", case));
    let head = format!(
        "{}/tests/data/captures/{}/{}.stream-head.bin",
        env!("CARGO_MANIFEST_DIR"),
        rt,
        case
    );
    if let Ok(stream) = std::fs::read(head) {
        input.extend_from_slice(&stream);
    }
    // Send a request with the same command (the machine only needs the command to type
    // the reply); ProcessInfo stands in for the malformed requests.
    struct Raw(Command);
    impl Request for Raw {
        fn command(&self) -> Command {
            self.0
        }
        fn payload_len(&self) -> usize {
            0
        }
        fn write_payload(&self, _: &mut dsipc::wire::Writer<'_>) {}
    }
    let command = match command {
        Command::Unknown { .. } => Command::ProcessInfo,
        c => c,
    };
    drive(&Raw(command), &input, |n| n, eof)
}

#[test]
fn net8_process_info_family() {
    let rt = "net8.0.4";
    let pi = reply_log(rt, "process-info", true);
    let pi2 = reply_log(rt, "process-info2", true);
    let pi3 = reply_log(rt, "process-info3", true);
    for l in [&pi, &pi2, &pi3] {
        assert_eq!(l.error, None);
        assert_eq!(l.events.len(), 1);
    }
    // Decode again to look at typed fields.
    let bytes = capture(rt, "process-info3.reply.bin");
    let r = Reply::decode(Command::ProcessInfo3, &bytes[20..])
        .unwrap()
        .unwrap();
    let p3 = match r {
        Reply::ProcessInfo3(p) => p,
        other => panic!("{:?}", other),
    };
    assert_eq!(p3.version, 1);
    assert_eq!(p3.os, "Linux");
    assert_eq!(p3.arch, "x64");
    assert_eq!(p3.clr_product_version, "8.0.4");
    assert_eq!(p3.runtime_identifier, "linux-x64");
    assert!(p3.managed_entrypoint_assembly_name.is_empty());
    assert!(p3.command_line.to_string().contains("python"));
    let b1 = capture(rt, "process-info.reply.bin");
    let p1 = match Reply::decode(Command::ProcessInfo, &b1[20..])
        .unwrap()
        .unwrap()
    {
        Reply::ProcessInfo(p) => p,
        other => panic!("{:?}", other),
    };
    // Same host process: same pid and cookie across the three commands.
    assert_eq!(p1.process_id, p3.process_id);
    assert_eq!(p1.runtime_cookie, p3.runtime_cookie);
    assert_eq!(p1.command_line, p3.command_line);
    assert_eq!(b1.len(), 164);
    assert_eq!(bytes.len(), 214);
}

#[test]
fn netcore31_rejects_process_commands_with_24_byte_error() {
    let bytes = capture("netcore3.1.23", "process-info.reply.bin");
    assert_eq!(bytes.len(), 24);
    let log = reply_log("netcore3.1.23", "process-info", true);
    assert_eq!(log.error, None);
    assert_eq!(
        log.events,
        vec![format!(
            "{:?}",
            dsipc::ClientEvent::Error(ErrorReply::new(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND))
        )]
    );
}

#[test]
fn error_replies_from_both_runtimes() {
    for rt in RUNTIMES {
        for (case, hr) in [
            ("unknown-command", Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND),
            ("bad-magic", Hresult::CORDIAGIPC_E_UNKNOWN_MAGIC),
            ("bad-encoding-size19", Hresult::CORDIAGIPC_E_BAD_ENCODING),
            ("attach-profiler", Hresult::ERROR_MOD_NOT_FOUND),
        ] {
            let log = reply_log(rt, case, true);
            assert_eq!(log.error, None, "{} {}", rt, case);
            let expect = format!("{:?}", dsipc::ClientEvent::Error(ErrorReply::new(hr)));
            assert_eq!(log.events, vec![expect], "{} {}", rt, case);
        }
    }
}

#[test]
fn net8_status_replies() {
    for case in [
        "resume-runtime",
        "enable-perfmap",
        "disable-perfmap",
        "set-environment-variable",
        "set-environment-variable-unset",
        "startup-profiler",
        "generate-core-dump",
    ] {
        let log = reply_log("net8.0.4", case, true);
        assert_eq!(log.error, None, "{}", case);
        assert_eq!(
            log.events,
            vec!["Reply(Ok(Hresult(S_OK)))".to_string()],
            "{}",
            case
        );
    }
    let log = reply_log("net8.0.4", "apply-startup-hook", true);
    assert_eq!(
        log.events,
        vec![format!(
            "{:?}",
            dsipc::ClientEvent::Error(ErrorReply::new(Hresult::E_INVALIDARG))
        )]
    );
}

#[test]
fn net8_generate_core_dump3_error_carries_message() {
    let bytes = capture("net8.0.4", "generate-core-dump3-bad-dir.reply.bin");
    let e = ErrorReply::decode(Command::GenerateCoreDump3, &bytes[20..]).unwrap();
    assert_eq!(e.hresult, Hresult::E_FAIL);
    let msg = e.message.unwrap().to_string();
    assert!(
        msg.starts_with("[createdump] Could not create output file"),
        "{}",
        msg
    );
    // The same bytes as a reply to GenerateCoreDump (v1) are "too long".
    let log = drive(
        &GenerateCoreDump {
            dump_name: "x".into(),
            dump_type: DumpType::Normal,
            diagnostics: 0,
        },
        &bytes,
        |n| n,
        true,
    );
    assert!(matches!(
        log.error,
        Some(ClientError::PayloadTooLong { .. })
    ));
}

#[test]
fn net8_process_environment_continuation() {
    let log = reply_log("net8.0.4", "process-environment", true);
    assert_eq!(log.error, None);
    assert!(log.events[0].starts_with("Reply(ProcessEnvironment"));
    assert_eq!(log.events.last().unwrap(), "EndOfStream");
    let vars: Vec<&String> = log.events[1..log.events.len() - 1].iter().collect();
    assert!(
        vars.iter().any(|v| v.contains("DSIPC_CAPTURE=1")),
        "{:?}",
        vars
    );
    let after = reply_log("net8.0.4", "process-environment-after-set", true);
    assert_eq!(after.error, None);
    assert!(after
        .events
        .iter()
        .any(|v| v.contains("DSIPC_CAPTURE_VAR=hello=world")));
}

#[test]
fn eventpipe_sessions_from_both_runtimes() {
    for rt in RUNTIMES {
        for case in ["collect-tracing", "collect-tracing2"] {
            let log = reply_log(rt, case, true);
            assert_eq!(log.error, None, "{} {}", rt, case);
            assert!(
                log.events[0].starts_with("Reply(SessionId("),
                "{:?}",
                log.events
            );
            assert_eq!(log.events.last().unwrap(), "EndOfStream");
            assert!(log
                .stream
                .starts_with(b"Nettrace\x14\x00\x00\x00!FastSerialization.1"));
            assert_eq!(log.stream.len(), 4096);
            // StopTracing echoes the session id.
            let start = capture(rt, &format!("{}.reply.bin", case));
            let stop = capture(rt, &format!("{}-stop.reply.bin", case));
            assert_eq!(stop.len(), 28);
            assert_eq!(&start[20..28], &stop[20..28]);
            let stop_req = capture(rt, &format!("{}-stop.request.bin", case));
            assert_eq!(&stop_req[20..28], &start[20..28]);
            let tail = capture(rt, &format!("{}.stream-tail.bin", case));
            assert_eq!(&tail[tail.len() - 2..], &[0x06, 0x01]);
        }
    }
}

/// The spec's three examples: the 20-byte OK, the 80-byte CollectTracing, the error reply
/// (with its real 24-byte size: the spec's table shows 28).
#[test]
fn spec_examples() {
    let ok: [u8; 20] = *b"DOTNET_IPC_V1\0\x14\0\xff\0\0\0";
    let log = drive(&ResumeRuntime, &ok, |n| n, true);
    assert_eq!(log.events, vec!["Reply(Ok(Hresult(S_OK)))".to_string()]);

    // The spec's CollectTracing example: src/payload/eventpipe/tests.rs checks every byte.

    let err: [u8; 24] = *b"DOTNET_IPC_V1\0\x18\0\xff\xff\0\0\x84\x13\x13\x80";
    let log = drive(&ProcessInfo, &err, |n| n, true);
    assert_eq!(
        log.events,
        vec![format!(
            "{:?}",
            dsipc::ClientEvent::Error(ErrorReply::new(Hresult::CORDIAGIPC_E_BAD_ENCODING))
        )]
    );
    let mut out = [0u8; 24];
    let n = Response::Error(ErrorReply::new(Hresult::CORDIAGIPC_E_BAD_ENCODING))
        .encode(&mut out)
        .unwrap();
    assert_eq!(&out[..n], &err);
}
