//! `env` is bounded and streamed.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::Instant;

use dsipc::wire::Text;
use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config, TempDir};

use crate::common::{bin, dsipc_in, fake, me, s, vm_hwm_kib, wait_bounded, LIMIT};

// ---- env is bounded and streamed ----

#[test]
fn env_refuses_a_runtime_announcing_gigabytes_with_the_typed_error() {
    let dir = TempDir::new("dsipc-h6").unwrap();
    let _rt = fake(
        &dir,
        Config::new().answer(
            Cmd::ProcessEnvironment,
            Answer::EnvironmentAnnouncing(u32::MAX),
        ),
    );
    let r = dsipc_in(dir.path(), &["env", &me()]);
    r.assert_exit(
        1,
        &["announced an environment of 4294967295 bytes, more than the limit of 16777216"],
    );
    // 64 MiB: below what the old code would take, above the default bound.
    let dir2 = TempDir::new("dsipc-h6b").unwrap();
    let _rt2 = fake(
        &dir2,
        Config::new().answer(
            Cmd::ProcessEnvironment,
            Answer::EnvironmentAnnouncing(64 << 20),
        ),
    );
    let r = dsipc_in(dir2.path(), &["env", &me()]);
    r.assert_exit(1, &["limit of 16777216"]);
    // The bound is configurable.
    let r = dsipc_in(dir.path(), &["env", &me(), "--max-bytes", "100"]);
    r.assert_exit(1, &["limit of 100 bytes"]);
}

#[test]
fn env_streams_entries_as_they_arrive_in_bounded_memory() {
    // 15 MiB of environment (under the default bound; 22 MB as UTF-8): collected, it would
    // need that much.
    let value: String = "環境".repeat(2000);
    let entry = format!("BIG={}", value);
    let unit = dsipc::conn::environment_block_len([Text::Str(&entry)]) - 4;
    let reps = (15usize << 20) / unit;
    let announced = (4 + reps * unit) as u32;
    let dir = TempDir::new("dsipc-h6s").unwrap();
    let _rt = fake(
        &dir,
        Config::new().environment(&[&entry]).answer(
            Cmd::ProcessEnvironment,
            Answer::EnvironmentAnnouncing(announced),
        ),
    );
    let mut child = Command::new(bin())
        .args(["env", &me(), "--timeout", "300", "--tmpdir", s(dir.path())])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let mut out = child.stdout.take().unwrap();
    // Read 6 MB, then look at the child while it is blocked writing the rest.
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0usize;
    while got < 6_000_000 {
        let n = out.read(&mut buf).unwrap();
        assert!(n > 0, "env ended after {} bytes", got);
        got += n;
    }
    let hwm = vm_hwm_kib(child.id());
    eprintln!("dsipc env VmHWM after 6 MB of output: {} KiB", hwm);
    assert!(
        hwm > 0,
        "dsipc env is blocked writing: its VmHWM must be readable"
    );
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    let status = wait_bounded(&mut child, "dsipc env", LIMIT).0;
    eprintln!("dsipc env: {} bytes in {:?}", got + rest.len(), t.elapsed());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(status.success(), "{}", err);
    let total = got + rest.len();
    assert_eq!(total, reps * (entry.len() + 1), "one line per entry");
    assert!(
        hwm < 12 * 1024,
        "VmHWM {} KiB: entries are not streamed",
        hwm
    );
}
