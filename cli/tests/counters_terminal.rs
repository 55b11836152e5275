//! Counter names, tags and notices come from the runtime: `dsipc counters monitor` must
//! escape their control characters before they reach a terminal (an OSC sequence in a
//! counter's display name must not retitle the window or hide lines).
#![cfg(target_os = "linux")]

mod common;

use std::time::Duration;

use common::{counters_capture_renaming_cpu_usage, dsipc_limit, fake, me, s};
use dsipc_testkit::{Config, StreamSpec, TempDir};

#[test]
fn counters_monitor_escapes_control_characters_from_the_runtime() {
    let dir = TempDir::new("dsipc-counters-terminal").unwrap();
    let _rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec::content(
            counters_capture_renaming_cpu_usage("\u{1b}]0;pw\u{7}!!"),
        )),
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
