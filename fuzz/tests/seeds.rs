//! Regenerates `corpus-seeds/` from the real-runtime captures in `../tests/data/captures`
//! plus a few hand-made inputs: `DSIPC_WRITE_SEEDS=1 cargo test --test seeds`. Without the
//! variable it only checks that every generated seed is present and unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use dsipc::wire::{Advertise, Guid, HEADER_LEN};
use dsipc::{Command, Request};
use dsipc_fuzz::{client_input, command_input, server_input, ADVERTISE, CLIENT_REQUESTS};

fn captures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/captures")
}

fn read(rt: &str, name: &str) -> Option<Vec<u8>> {
    std::fs::read(captures().join(rt).join(name)).ok()
}

/// (runtime, case, command) from each manifest.
fn cases() -> Vec<(String, String, Command)> {
    let mut out = Vec::new();
    for rt in ["net8.0.4", "netcore3.1.23"] {
        let text = std::fs::read_to_string(captures().join(rt).join("manifest.json")).unwrap();
        // A minimal reader for the manifest's `"case": "...", "command": "XXXX"` pairs.
        let mut case = None;
        for line in text.lines() {
            let line = line.trim();
            if let Some(v) = line.strip_prefix("\"case\": \"") {
                case = Some(v.trim_end_matches(['"', ',']).to_string());
            } else if let Some(v) = line.strip_prefix("\"command\": \"") {
                let hex = v.trim_end_matches(['"', ',']);
                let code = u16::from_str_radix(hex, 16).unwrap();
                let command = Command::from_code((code >> 8) as u8, code as u8);
                out.push((rt.to_string(), case.take().unwrap(), command));
            }
        }
    }
    assert!(out.len() > 20);
    out
}

fn utf16(s: &str) -> Vec<u8> {
    s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect()
}

fn seeds() -> BTreeMap<String, Vec<u8>> {
    let mut s = BTreeMap::new();
    let mut put = |target: &str, name: &str, data: Vec<u8>| {
        s.insert(format!("{}/{}", target, name), data);
    };
    let known_requests: Vec<Command> = CLIENT_REQUESTS.iter().map(|r| r.command()).collect();

    for (rt, case, command) in cases() {
        let tag = format!("{}-{}", rt, case);
        let req = read(&rt, &format!("{}.request.bin", case)).unwrap();
        let reply = read(&rt, &format!("{}.reply.bin", case)).unwrap();
        // header: the first 20 bytes of both directions.
        put(
            "header",
            &format!("{}.request", tag),
            req[..HEADER_LEN.min(req.len())].to_vec(),
        );
        put(
            "header",
            &format!("{}.reply", tag),
            reply[..HEADER_LEN].to_vec(),
        );
        // request: the command bytes of the header, then the payload.
        if req.len() >= HEADER_LEN {
            let mut v = vec![req[16], req[17]];
            v.extend_from_slice(&req[HEADER_LEN..]);
            put("request", &tag, v);
        }
        // server: the request as a tool sent it, whole, split, and on a reverse port.
        put(
            "server",
            &format!("{}.whole", tag),
            server_input(true, false, false, &[], &req),
        );
        if rt == "net8.0.4" {
            put(
                "server",
                &format!("{}.split", tag),
                server_input(true, true, false, &[5, 14, 0], &req),
            );
        }
        // reply: the request's command, then the first message's payload.
        let size = u16::from_le_bytes([reply[14], reply[15]]) as usize;
        put(
            "reply",
            &tag,
            command_input(command, &reply[HEADER_LEN..size]),
        );
        // client: everything the runtime sent until EOF (plus the stream head for sessions).
        let mut peer = reply.clone();
        if let Some(head) = read(&rt, &format!("{}.stream-head.bin", case)) {
            peer.extend_from_slice(&head);
        }
        let sent = if known_requests.contains(&command) {
            command
        } else {
            Command::ProcessInfo
        };
        put(
            "client",
            &format!("{}.whole", tag),
            client_input(sent, true, false, &[19], &peer),
        );
        if rt == "net8.0.4" && (case == "process-environment" || case == "process-info3") {
            put(
                "client",
                &format!("{}.bytewise", tag),
                client_input(sent, true, false, &[], &peer),
            );
            put(
                "client",
                &format!("{}.split", tag),
                client_input(sent, true, false, &[3, 20, 0, 40], &peer),
            );
        }
    }
    if let Some(tail) = read("net8.0.4", "collect-tracing2.stream-tail.bin") {
        let reply = read("net8.0.4", "collect-tracing2.reply.bin").unwrap();
        let mut peer = reply;
        peer.extend_from_slice(&tail);
        put(
            "client",
            "net8.0.4-collect-tracing2.tail",
            client_input(Command::CollectTracing2, true, false, &[27, 1], &peer),
        );
    }

    // client on a reverse port: the Advertise, then the reply.
    let mut adv = [0u8; 34];
    ADVERTISE.emit(&mut adv).unwrap();
    let mut peer = adv.to_vec();
    peer.extend_from_slice(&read("net8.0.4", "process-info.reply.bin").unwrap());
    put(
        "client",
        "advertise-process-info",
        client_input(Command::ProcessInfo, true, true, &[10, 30], &peer),
    );
    put(
        "client",
        "advertise-truncated",
        client_input(Command::ProcessInfo, true, true, &[], &adv[..20]),
    );

    // server: hand-made.
    let mut two = read("net8.0.4", "process-info.request.bin").unwrap();
    two.extend_from_slice(b"\x01extra");
    put(
        "server",
        "request-then-client-data",
        server_input(true, false, false, &[3], &two),
    );
    put(
        "server",
        "size-below-20",
        server_input(false, false, false, &[], b"DOTNET_IPC_V1\0\x13\0\x04\0\0\0"),
    );
    put(
        "server",
        "eof-inside-header",
        server_input(true, false, false, &[], b"DOTNET_IPC"),
    );
    put(
        "server",
        "half-close-after-request",
        server_input(true, false, true, &[7], &two),
    );
    for case in ["process-environment", "collect-tracing2", "bad-magic"] {
        let req = read("net8.0.4", &format!("{}.request.bin", case)).unwrap();
        put(
            "server",
            &format!("half-close-{}", case),
            server_input(false, false, true, &[], &req),
        );
    }
    put(
        "server",
        "nothing",
        server_input(true, true, false, &[], b""),
    );

    // header: hand-made.
    put(
        "header",
        "spec-ok",
        b"DOTNET_IPC_V1\0\x14\0\xff\0\0\0".to_vec(),
    );
    put(
        "header",
        "size-19",
        b"DOTNET_IPC_V1\0\x13\0\x04\0\0\0".to_vec(),
    );
    put("header", "truncated", b"DOTNET_IPC_V1\0\x14".to_vec());

    // advertise: the spec's example and the real bytes from observed-runtime-behavior.md.
    let adv = Advertise {
        runtime_cookie: Guid::parse("123e4567-e89b-12d3-a456-426614174000").unwrap(),
        process_id: 12345,
        future: 0,
    };
    let mut b = [0u8; 34];
    adv.emit(&mut b).unwrap();
    put("advertise", "spec", b.to_vec());
    let hex = "414456525f563100d1ccbefdb5c3774999a792a9f7e91da83c710000000000000000";
    let real: Vec<u8> = (0..34)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    put("advertise", "real-runtime", real.clone());
    put("advertise", "truncated", real[..33].to_vec());
    let mut bad = real;
    bad[0] = b'a';
    put("advertise", "bad-magic", bad);

    // reply: hand-made edge cases.
    put(
        "reply",
        "status-empty",
        command_input(Command::ResumeRuntime, &[]),
    );
    put(
        "reply",
        "session-id-long",
        command_input(Command::StopTracing, &[0; 9]),
    );
    let mut pi3 = 2u32.to_le_bytes().to_vec();
    pi3.extend_from_slice(&[7; 8]);
    pi3.extend_from_slice(&[0; 16]);
    for _ in 0..6 {
        pi3.extend_from_slice(&[1, 0, 0, 0, 0, 0]);
    }
    pi3.extend_from_slice(b"ext");
    put(
        "reply",
        "process-info3-v2-extension",
        command_input(Command::ProcessInfo3, &pi3),
    );
    let mut msg = 0x8000_4005u32.to_le_bytes().to_vec();
    msg.extend_from_slice(&3u32.to_le_bytes());
    msg.extend_from_slice(&utf16("ok\0"));
    put(
        "reply",
        "dump3-message",
        command_input(Command::GenerateCoreDump3, &msg),
    );

    // request: hand-made edge cases (CollectTracing5/6 are not in the captures).
    let ct5 = dsipc_fuzz::sample_request_for(Command::CollectTracing5);
    for (i, r) in CLIENT_REQUESTS.iter().enumerate() {
        let mut buf = vec![0u8; r.encoded_len()];
        let n = r.encode(&mut buf).unwrap();
        put(
            "request",
            &format!("sample-{:02}-{}", i, r.command().name()),
            command_input(r.command(), &buf[HEADER_LEN..n]),
        );
    }
    let _ = ct5;
    put(
        "request",
        "count-overflow",
        command_input(Command::ApplyStartupHook, &[0xff, 0xff, 0xff, 0xff]),
    );
    put(
        "request",
        "many-providers",
        command_input(
            Command::CollectTracing,
            &[1, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff],
        ),
    );

    // transport.
    put("transport", "ports", b"/tmp/a.sock,nosuspend;;/b.sock,SUSPEND,nosuspend,listen,connect;nosuspend,connect;,,/c,bogus".to_vec());
    put(
        "transport",
        "socket-name",
        b"dotnet-diagnostic-4242-987654-socket".to_vec(),
    );
    put(
        "transport",
        "pipe-name",
        br"\\.\pipe\dotnet-diagnostic-31".to_vec(),
    );
    put("transport", "stat", b"1234 (we ) ird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 5551212 100000 200 18446744073709551615".to_vec());
    put(
        "transport",
        "guid",
        b"{12345678-1234-5678-9abc-def012345678}".to_vec(),
    );

    // utf16.
    put("utf16", "ascii", utf16("/usr/bin/dotnet app.dll"));
    put(
        "utf16",
        "bmp-and-astral",
        utf16("é€日本語 \u{1F600}\u{10FFFF}"),
    );
    let mut lone = utf16("ab");
    lone.extend_from_slice(&0xDC00u16.to_le_bytes());
    lone.extend_from_slice(&0xD800u16.to_le_bytes());
    lone.push(b'x');
    put("utf16", "lone-surrogates-odd", lone);
    put(
        "utf16",
        "utf8-text",
        "PATH=/usr/bin:é€𝄞".as_bytes().to_vec(),
    );

    // roundtrip_*: any bytes; the captures give arbitrary() varied choices.
    for (i, name) in [
        "process-info3.reply.bin",
        "collect-tracing2.request.bin",
        "generate-core-dump3-bad-dir.reply.bin",
        "attach-profiler.request.bin",
    ]
    .iter()
    .enumerate()
    {
        let data = read("net8.0.4", name).unwrap();
        put("roundtrip_request", &format!("capture-{}", i), data.clone());
        put("roundtrip_response", &format!("capture-{}", i), data);
    }
    put("roundtrip_request", "zeros", vec![0; 64]);
    put("roundtrip_response", "zeros", vec![0; 64]);
    put("roundtrip_request", "ramp", (0..=255).collect());
    put("roundtrip_response", "ramp", (0..=255).collect());
    session_seeds(&mut put);
    nettrace_seeds(&mut put);
    heap_seeds(&mut put);
    s
}

/// `heap_stream` seeds: the heads of the committed heap captures (dotnet-gcdump's session),
/// cut at a block boundary and closed with the end marker, whole and chunked; `gcdump`
/// seeds: the head of a `.gcdump` written from one of them, and its bare signature.
fn heap_seeds(put: &mut dyn FnMut(&str, &str, Vec<u8>)) {
    use dsipc::nettrace::{Item, NettraceParser, Status};
    use dsipc_fuzz::nettrace_input;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/nettrace");
    for rt in ["net8.0.4", "netcore3.1.23"] {
        let out = std::process::Command::new("gzip")
            .arg("-dc")
            .arg(dir.join(format!("heap-{}.nettrace.gz", rt)))
            .output()
            .expect("gzip runs");
        assert!(out.status.success());
        let data = out.stdout;
        // The blocks that end within the first 64 KiB.
        let mut p = NettraceParser::new();
        let (mut at, mut cut) = (0, 0);
        loop {
            let h = p.handle_input(&data[at..]).unwrap();
            at += h.consumed;
            match h.status {
                Status::Event(Item::Block(b)) => {
                    let end = (b.content_offset + u64::from(b.size)) as usize + 1;
                    if end <= 64 * 1024 {
                        cut = end;
                    }
                }
                Status::Event(_) => {}
                _ => break,
            }
        }
        let mut small = data[..cut].to_vec();
        small.push(0x01);
        put(
            "heap_stream",
            &format!("{}-head", rt),
            nettrace_input(0, &[], &small),
        );
        put(
            "heap_stream",
            &format!("{}-head-chunked", rt),
            nettrace_input(1, &[0, 6, 200, 31, 2], &small),
        );
        if rt == "net8.0.4" {
            let mut s = dsipc_trace::heap::HeapStream::new();
            s.feed(&data).unwrap();
            s.finish().unwrap();
            let graph = s.into_graph().unwrap();
            let mut file = Vec::new();
            dsipc_trace::heap::gcdump::write(&graph, &Default::default(), &mut file).unwrap();
            put("gcdump", "net8.0.4-head-4k", file[..4096].to_vec());
            put("gcdump", "signature", file[..24.min(file.len())].to_vec());
        }
    }
}

/// `nettrace` seeds: slices of the golden real-runtime traces in `../tests/data/nettrace`,
/// cut at a block boundary and closed with the end marker (complete small streams), their
/// heads (truncated streams), and hand-made broken headers. `nettrace_fields` seeds:
/// hand-made descriptions of every type code with matching payloads.
fn nettrace_seeds(put: &mut dyn FnMut(&str, &str, Vec<u8>)) {
    use dsipc::nettrace::{Item, NettraceParser, Status};
    use dsipc_fuzz::{nettrace_fields_input, nettrace_input};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/nettrace");
    for rt in ["net8.0.4", "netcore3.1.23"] {
        let data = std::fs::read(dir.join(format!("{}-busy.nettrace", rt))).unwrap();
        // .NET 8: up to the end of the first event block (~38 KB); Core 3.1: the blocks that
        // end within the first 12 KiB (metadata and stacks).
        let mut p = NettraceParser::new();
        let (mut at, mut cut) = (0, 0);
        loop {
            let h = p.handle_input(&data[at..]).unwrap();
            at += h.consumed;
            match h.status {
                Status::Event(Item::Block(b)) => {
                    let end = (b.content_offset + u64::from(b.size)) as usize + 1;
                    let first_event =
                        rt == "net8.0.4" && cut == 0 && b.kind == dsipc::nettrace::BlockKind::Event;
                    let early = rt != "net8.0.4" && end <= 12 * 1024;
                    if first_event || early {
                        cut = end;
                    }
                }
                Status::Event(_) => {}
                _ => break,
            }
        }
        let mut small = data[..cut].to_vec();
        small.push(0x01);
        put(
            "nettrace",
            &format!("{}-first-blocks", rt),
            nettrace_input(0, &[], &small),
        );
        // The trace layer's target takes the same input.
        put(
            "trace_layer",
            &format!("{}-first-blocks-chunked", rt),
            nettrace_input(1, &[0, 6, 200, 31, 2], &small),
        );
        put(
            "nettrace",
            &format!("{}-first-blocks-chunked", rt),
            nettrace_input(1, &[0, 6, 200, 31, 2], &small),
        );
        put(
            "nettrace",
            &format!("{}-head-4k", rt),
            nettrace_input(3, &[63], &data[..4096]),
        );
        put(
            "nettrace",
            &format!("{}-tail-512", rt),
            nettrace_input(0, &[], &data[data.len() - 512..]),
        );
    }
    let mut netperf = b"\x14\0\0\0!FastSerialization.1".to_vec();
    netperf.extend_from_slice(&[5, 5, 1, 3, 0, 0, 0]);
    put("nettrace", "netperf", nettrace_input(0, &[], &netperf));
    let mut v6 = b"Nettrace\0\0\0\0\x06\0\0\0\0\0\0\0".to_vec();
    let mut trace = vec![0u8; 16 + 16];
    trace.extend_from_slice(&8u32.to_le_bytes());
    trace.extend_from_slice(&1u32.to_le_bytes());
    trace.extend_from_slice(&[9]);
    trace.extend_from_slice(b"ProcessId");
    trace.extend_from_slice(&[2]);
    trace.extend_from_slice(b"42");
    v6.extend_from_slice(&(trace.len() as u32 | 1 << 24).to_le_bytes());
    v6.extend_from_slice(&trace);
    for (kind, content) in [
        (6u8, vec![4, 0, 1, 3, 100, 0]),
        (
            8,
            vec![1, 0, 0, 0, 1, 0, 0, 0, 0x84, 7, 0, 0, 0, 0, 0, 0, 0],
        ),
        (7, vec![1, 5]),
        (
            4,
            vec![0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1, 9],
        ),
        (0, vec![]),
    ] {
        v6.extend_from_slice(&(content.len() as u32 | u32::from(kind) << 24).to_le_bytes());
        v6.extend_from_slice(&content);
    }
    put("nettrace", "v6-blocks", nettrace_input(0, &[3], &v6));

    // nettrace_fields: V4 fields Int32 "a", String "s", Object "o" { Double "d", Guid "g" }.
    let mut v1 = 3u32.to_le_bytes().to_vec();
    for (code, name) in [(9u32, "a"), (18, "s")] {
        v1.extend_from_slice(&code.to_le_bytes());
        v1.extend_from_slice(&utf16(name));
        v1.extend_from_slice(&[0, 0]);
    }
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&2u32.to_le_bytes());
    for (code, name) in [(14u32, "d"), (17, "g")] {
        v1.extend_from_slice(&code.to_le_bytes());
        v1.extend_from_slice(&utf16(name));
        v1.extend_from_slice(&[0, 0]);
    }
    v1.extend_from_slice(&utf16("o"));
    v1.extend_from_slice(&[0, 0]);
    let mut payload = 7i32.to_le_bytes().to_vec();
    payload.extend_from_slice(&utf16("hi\0"));
    payload.extend_from_slice(&2.5f64.to_le_bytes());
    payload.extend_from_slice(&[0xAB; 16]);
    put(
        "nettrace_fields",
        "v4-object",
        nettrace_fields_input(0, &v1, &payload),
    );
    // V2Params: Array "names" of String.
    let mut v2 = 1u32.to_le_bytes().to_vec();
    let mut f = utf16("names\0");
    f.extend_from_slice(&19u32.to_le_bytes());
    f.extend_from_slice(&18u32.to_le_bytes());
    v2.extend_from_slice(&(f.len() as u32 + 4).to_le_bytes());
    v2.extend_from_slice(&f);
    let mut payload = 2u16.to_le_bytes().to_vec();
    payload.extend_from_slice(&utf16("x\0yz\0"));
    put(
        "nettrace_fields",
        "v2params-array",
        nettrace_fields_input(1, &v2, &payload),
    );
    // V6: VarInt, VarUInt, FixedLengthArray of 2 UInt16, Utf8CodeUnit, RelLoc of Byte,
    // DataLoc of Byte, DateTime, Boolean.
    let mut v6f = 8u16.to_le_bytes().to_vec();
    for (name, ty) in [
        ("v", vec![20u8]),
        ("u", vec![21]),
        ("fa", vec![22, 8, 2, 0]),
        ("c", vec![23]),
        ("rl", vec![24, 6]),
        ("dl", vec![25, 6]),
        ("t", vec![16]),
        ("b", vec![3]),
    ] {
        let mut body = vec![name.len() as u8];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&ty);
        v6f.extend_from_slice(&(body.len() as u16).to_le_bytes());
        v6f.extend_from_slice(&body);
    }
    let mut payload = vec![0x03, 0xAC, 0x02, 1, 0, 2, 0, b'x'];
    payload.extend_from_slice(&(16u32 | 2 << 16).to_le_bytes());
    payload.extend_from_slice(&(30u32 | 1 << 16).to_le_bytes());
    payload.extend_from_slice(&[1; 8]);
    payload.extend_from_slice(&1u32.to_le_bytes());
    payload.extend_from_slice(&[0xEE; 12]);
    put(
        "nettrace_fields",
        "v6-types",
        nettrace_fields_input(2, &v6f, &payload),
    );
    // A MethodLoadVerbose v2 payload (for the CLR layouts), no descriptions.
    let mut m = Vec::new();
    for v in [0x7f00_1000u64, 0x7f00_2000, 0x7f00_3000] {
        m.extend_from_slice(&v.to_le_bytes());
    }
    m.extend_from_slice(&[0x40, 0, 0, 0, 1, 0, 0, 6, 8, 0, 0, 0]);
    for t in ["Ns.Type\0", "Run\0", "void  ()\0"] {
        m.extend_from_slice(&utf16(t));
    }
    m.extend_from_slice(&[0; 10]);
    put(
        "nettrace_fields",
        "method-load-verbose-v2",
        nettrace_fields_input(8, &[0, 0, 0, 0], &m),
    );
}

/// The `session` target: [chunk, stop, split] then the runtime's bytes on the session's
/// connection: the CollectTracing2 reply (or UNKNOWN_COMMAND, then the fallback's reply) and
/// a real .NET 8 stream, whole or cut.
fn session_seeds(put: &mut dyn FnMut(&str, &str, Vec<u8>)) {
    use dsipc::payload::{ErrorReply, Reply};
    use dsipc::wire::Hresult;
    use dsipc::Response;
    let encode = |r: Response<'_>| {
        let mut v = vec![0u8; r.encoded_len()];
        let n = r.encode(&mut v).unwrap();
        v.truncate(n);
        v
    };
    let ok = encode(Response::Ok(Reply::SessionId(0x7f00)));
    let unknown = encode(Response::Error(ErrorReply {
        hresult: Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
        message: None,
    }));
    let trace = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/nettrace/activities-net8.0.4.nettrace"),
    )
    .unwrap();
    let input = |chunk: u8, stop: u8, split: u8, parts: &[&[u8]]| {
        let mut v = vec![chunk, stop, split];
        for p in parts {
            v.extend_from_slice(p);
        }
        v
    };
    put("session", "net8-stopped", input(0, 1, 255, &[&ok, &trace]));
    put(
        "session",
        "net8-chunked-7",
        input(6, 40, 255, &[&ok, &trace]),
    );
    put(
        "session",
        "fallback-to-collecttracing",
        // The first connection answers UNKNOWN_COMMAND (24 bytes = 3 × 8), the fallback's
        // the rest.
        input(12, 1, 3, &[&unknown, &ok, &trace]),
    );
    put(
        "session",
        "net8-cut",
        input(3, 255, 255, &[&ok, &trace[..trace.len() / 2]]),
    );
}

#[test]
fn seeds_are_generated() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus-seeds");
    let write = std::env::var_os("DSIPC_WRITE_SEEDS").is_some();
    let all = seeds();
    for (name, data) in &all {
        let path = root.join(name);
        if write {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, data).unwrap();
        } else {
            let have = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "{}: {} (DSIPC_WRITE_SEEDS=1 regenerates)",
                    path.display(),
                    e
                )
            });
            assert!(
                &have == data,
                "{} differs from its generator",
                path.display()
            );
        }
    }
    eprintln!("{} seeds", all.len());
}
