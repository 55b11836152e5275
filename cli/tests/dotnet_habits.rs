//! The dotnet-* tools' command lines, typed as their users type them: the process picked
//! by `-p/--process-id` or `-n/--name` as well as by a PID argument, and the verb forms
//! (`trace collect`, `stack report`, `dump collect`, `trace ps`). Against a fake runtime
//! listening for this test process's pid.
#![cfg(target_os = "linux")]

mod common;

use std::fs;

use common::{dsipc_in, fake, me, s};
use dsipc_testkit::{Config, StreamSpec, TempDir};

/// A fake runtime for this process, its socket named with this process's start key (so
/// that discovery, which `-n` and `ps` run, takes it for live).
fn runtime(dir: &TempDir, config: Config) -> dsipc_testkit::FakeRuntime {
    let key = dsipc_std::unix::start_key(std::process::id()).expect("start key");
    fake(dir, config.key(key))
}

/// This process's name as `/proc` gives it (what `-n` matches, as `GetProcessesByName`).
fn my_name() -> String {
    fs::read_to_string("/proc/self/comm")
        .unwrap()
        .trim_end()
        .to_string()
}

#[test]
fn the_process_is_picked_by_pid_process_id_or_name() {
    let dir = TempDir::new("dsipc-habit-p").unwrap();
    let _rt = runtime(&dir, Config::new());
    let pid = me();
    let name = my_name();
    let by_positional = dsipc_in(dir.path(), &["info", &pid]);
    assert_eq!(by_positional.code, Some(0), "{}", by_positional.stderr);
    for args in [
        vec!["info", "-p", &pid],
        vec!["info", "--process-id", &pid],
        vec!["info", "-n", &name],
        vec!["info", "--name", &name],
    ] {
        let r = dsipc_in(dir.path(), &args);
        assert_eq!(r.code, Some(0), "{:?}: {}", args, r.stderr);
        assert_eq!(r.stdout, by_positional.stdout, "{:?}", args);
    }
    // setenv's NAME VALUE stay where they were when -p gives the process.
    let r = dsipc_in(dir.path(), &["setenv", "-p", &pid, "A", "1"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}

#[test]
fn a_process_given_twice_or_a_name_nobody_has_is_a_clear_error() {
    let dir = TempDir::new("dsipc-habit-e").unwrap();
    let _rt = runtime(&dir, Config::new());
    let pid = me();
    let r = dsipc_in(dir.path(), &["info", &pid, "-p", &pid]);
    r.assert_usage("the process is given twice");
    let r = dsipc_in(dir.path(), &["info", "-p", &pid, "-n", "x"]);
    r.assert_usage("not both");
    let r = dsipc_in(dir.path(), &["info", "-n", "no-such-dotnet-app"]);
    r.assert_exit(
        1,
        &["no .NET process named \"no-such-dotnet-app\"", "dsipc ps"],
    );
}

#[test]
fn verb_forms_of_the_dotnet_tools_run_the_same_command() {
    let dir = TempDir::new("dsipc-habit-v").unwrap();
    let stream: &'static [u8] = Box::leak(common::nettrace_stream(50_000).into_boxed_slice());
    let _rt = runtime(&dir, Config::new().stream(StreamSpec::content(stream)));
    let files = TempDir::new("dsipc-habit-vf").unwrap();
    let out = files.path().join("t.nettrace");
    let pid = me();
    // dotnet-trace collect --process-id PID -o FILE
    let r = dsipc_in(
        dir.path(),
        &[
            "trace",
            "collect",
            "--process-id",
            &pid,
            "-o",
            s(&out),
            "--duration",
            "1",
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(out.is_file());
    let r = dsipc_in(dir.path(), &["trace", "ps"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains(&pid), "{}", r.stdout);
    let r = dsipc_in(dir.path(), &["trace", "collect", "--help"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.starts_with("usage: dsipc trace"), "{}", r.stdout);
}

#[test]
fn a_mistyped_command_gets_a_suggestion() {
    let dir = TempDir::new("dsipc-habit-s").unwrap();
    let r = dsipc_in(dir.path(), &["trase", "1"]);
    r.assert_usage("unknown command \"trase\" (did you mean trace?)");
    let r = dsipc_in(dir.path(), &["zzzzzz"]);
    r.assert_usage("unknown command \"zzzzzz\"");
    assert!(!r.stderr.contains("did you mean"), "{}", r.stderr);
}
