//! Counter names, tags and notices come from the runtime: `dsipc counters monitor` must
//! escape their control characters before they reach a terminal (an OSC sequence in a
//! counter's display name must not retitle the window or hide lines).
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{dsipc_limit, fake, me, repo_root, s};
use dsipc_testkit::{Config, StreamSpec, TempDir};

/// The committed .NET Core 3.1 counters capture with every "CPU Usage" display name
/// replaced, at the same length, by an OSC title sequence ending in BEL.
fn hostile_capture() -> &'static [u8] {
    let path = repo_root().join("tests/data/counters/netcore3.1.23-system-runtime.nettrace");
    let mut data = std::fs::read(path).unwrap();
    let utf16 = |t: &str| -> Vec<u8> { t.encode_utf16().flat_map(|u| u.to_le_bytes()).collect() };
    let (from, to) = (utf16("CPU Usage"), utf16("\u{1b}]0;pw\u{7}!!"));
    assert_eq!(from.len(), to.len());
    let mut replaced = 0;
    let mut i = 0;
    while i + from.len() <= data.len() {
        if data[i..i + from.len()] == from[..] {
            data[i..i + from.len()].copy_from_slice(&to);
            replaced += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(replaced > 0, "the capture names CPU Usage");
    Box::leak(data.into_boxed_slice())
}

#[test]
fn counters_monitor_escapes_control_characters_from_the_runtime() {
    let dir = TempDir::new("dsipc-counters-terminal").unwrap();
    let _rt = fake(
        &dir,
        Config::new()
            .like_net8_0_4()
            .stream(StreamSpec::content(hostile_capture())),
    );
    let pid = me();
    let r = dsipc_limit(
        &[
            "counters",
            "monitor",
            &pid,
            "--counters",
            "System.Runtime",
            "--tmpdir",
            s(dir.path()),
        ],
        Duration::from_secs(60),
    );
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        !all.contains('\u{1b}') && !all.contains('\u{7}'),
        "a raw control character reached the output:\n{:?}",
        all
    );
    // The counter itself is shown, escaped.
    assert!(
        r.stdout.contains("\\x1b]0;pw\\x07!!"),
        "the escaped name is missing:\n{}\n{}",
        r.stdout,
        r.stderr
    );
}
