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
    let r = dsipc_in(dir.path(), &["trace", "1", "--duratoin", "3"]);
    r.assert_usage("unknown option \"--duratoin\" (did you mean --duration?)");
    let r = dsipc_in(dir.path(), &["zzzzzz"]);
    r.assert_usage("unknown command \"zzzzzz\"");
    assert!(!r.stderr.contains("did you mean"), "{}", r.stderr);
}

/// `dsipc ARGS --tmpdir TMPDIR` run in `cwd`, bounded: (exit code, stdout, stderr).
fn dsipc_at(
    cwd: &std::path::Path,
    tmpdir: &std::path::Path,
    args: &[&str],
) -> (Option<i32>, String, String) {
    use std::io::Read;
    let mut child = std::process::Command::new(common::bin())
        .current_dir(cwd)
        .args(args)
        .arg("--tmpdir")
        .arg(tmpdir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (status, _) = common::wait_bounded(&mut child, "dsipc", common::LIMIT);
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), out, err)
}

/// The files in `dir`, sorted.
fn files_in(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn trace_without_o_writes_dotnet_traces_default_name_and_never_the_previous_runs() {
    let dir = TempDir::new("dsipc-habit-t").unwrap();
    let stream: &'static [u8] = Box::leak(common::nettrace_stream(50_000).into_boxed_slice());
    let _rt = runtime(&dir, Config::new().stream(StreamSpec::content(stream)));
    let cwd = TempDir::new("dsipc-habit-tc").unwrap();
    let pid = me();
    for _ in 0..2 {
        let (code, _, err) = dsipc_at(cwd.path(), dir.path(), &["trace", &pid, "--duration", "1"]);
        assert_eq!(code, Some(0), "{}", err);
    }
    let files = files_in(cwd.path());
    assert_eq!(files.len(), 2, "{:?}", files);
    let prefix = format!("{}_", my_name());
    for f in &files {
        assert!(
            f.starts_with(&prefix) && f.ends_with(".nettrace"),
            "{:?}",
            files
        );
        // APP_yyyyMMdd_HHmmss[_N].nettrace
        let stamp = &f[prefix.len()..prefix.len() + 15];
        assert!(
            stamp.chars().enumerate().all(|(i, c)| if i == 8 {
                c == '_'
            } else {
                c.is_ascii_digit()
            }),
            "{}",
            f
        );
    }
}

#[test]
fn option_values_are_case_insensitive_and_dump_defaults_to_a_full_dump_named_as_dotnet_dump() {
    let dir = TempDir::new("dsipc-habit-c").unwrap();
    let stream: &'static [u8] = Box::leak(common::nettrace_stream(50_000).into_boxed_slice());
    let _rt = runtime(&dir, Config::new().stream(StreamSpec::content(stream)));
    let cwd = TempDir::new("dsipc-habit-cc").unwrap();
    let pid = me();
    let (code, _, err) = dsipc_at(
        cwd.path(),
        dir.path(),
        &[
            "trace",
            &pid,
            "-o",
            "t.nettrace",
            "--duration",
            "1",
            "--format",
            "Speedscope",
        ],
    );
    assert_eq!(code, Some(0), "{}", err);
    assert!(
        cwd.path().join("t.speedscope.json").is_file(),
        "{:?}",
        files_in(cwd.path())
    );
    let (code, out, err) = dsipc_at(cwd.path(), dir.path(), &["dump", &pid]);
    assert_eq!(code, Some(0), "{}", err);
    let want = format!(
        "dsipc: wrote a full dump of pid {} to {}/core_",
        pid,
        cwd.path().display()
    );
    // Result lines on stderr, as every command's: stdout is for data.
    assert!(
        err.starts_with(&want) && out.is_empty(),
        "{} / {}",
        out,
        err
    );
    let (code, _, err) = dsipc_at(
        cwd.path(),
        dir.path(),
        &["dump", &pid, "--type", "Triage", "-o", "d"],
    );
    assert_eq!(code, Some(0), "{}", err);
    assert!(err.starts_with("dsipc: wrote a triage dump"), "{}", err);
}

#[test]
fn monitor_pid_points_at_counters_monitor() {
    let dir = TempDir::new("dsipc-habit-m").unwrap();
    for args in [&["monitor", "1234"][..], &["monitor", "-p", "1234"][..]] {
        let r = dsipc_in(dir.path(), args);
        r.assert_usage("dsipc counters monitor PID");
    }
    // A number as an option's value is no PID.
    let r = dsipc_in(dir.path(), &["monitor", "--max-connections", "100"]);
    r.assert_usage("monitor needs --listen PATH");
}

#[test]
fn a_usage_error_points_at_the_commands_own_help() {
    let dir = TempDir::new("dsipc-habit-h").unwrap();
    let r = dsipc_in(dir.path(), &["trace", "1", "--bogus"]);
    r.assert_usage("unknown option \"--bogus\" (see dsipc trace --help)");
    let r = dsipc_in(dir.path(), &["counters", "monitor", "--bogus"]);
    r.assert_usage("(see dsipc counters --help)");
    let r = dsipc_in(dir.path(), &["zzzzzz"]);
    r.assert_usage("(see dsipc --help)");
}

/// Runs `dsipc ARGS` as user nobody (65534) through `setpriv`, bounded; `None` when that
/// cannot be done here (not root, no setpriv, or the binary not reachable by nobody).
fn dsipc_as_nobody(args: &[&str]) -> Option<common::Run> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let setpriv = std::path::Path::new("/usr/bin/setpriv");
    let prefix = ["--reuid=65534", "--regid=65534", "--clear-groups"];
    let bin = common::bin();
    let with = |rest: &[&str]| {
        let mut v: Vec<std::ffi::OsString> = prefix.iter().map(Into::into).collect();
        v.push(bin.clone().into_os_string());
        v.extend(rest.iter().map(Into::into));
        v
    };
    if !setpriv.is_file() {
        return None;
    }
    let probe = common::run_program(setpriv, &with(&["--version"]), None, common::LIMIT);
    if probe.code != Some(0) {
        return None;
    }
    Some(common::run_program(
        setpriv,
        &with(args),
        None,
        common::LIMIT,
    ))
}

/// A runtime whose socket this user may not open is named with the socket's owner and what
/// to do, by the command and by `ps`, instead of "did not answer".
#[test]
fn a_runtime_you_may_not_connect_to_is_named_with_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let dir = TempDir::new("dsipc-habit-perm").unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let rt = runtime(&dir, Config::new());
    let sock = rt.socket_path().unwrap().to_path_buf();
    fs::set_permissions(&sock, fs::Permissions::from_mode(0o600)).unwrap();
    let pid = me();
    let tmpdir = s(dir.path());
    let r = match dsipc_as_nobody(&["info", &pid, "--tmpdir", tmpdir]) {
        Some(r) => r,
        None => {
            eprintln!("SKIPPED a_runtime_you_may_not_connect_to_is_named_with_its_owner: needs root and setpriv to run dsipc as another user");
            return;
        }
    };
    r.assert_exit(
        1,
        &[
            "Permission denied",
            "the socket belongs to root (uid 0): run as root)",
        ],
    );
    let r = dsipc_as_nobody(&["ps", "--tmpdir", tmpdir]).unwrap();
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout.lines().any(|l| l.starts_with(&pid)),
        "{}",
        r.stdout
    );
    assert!(
        r.stderr.contains(&format!("pid {}: cannot connect", pid)),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("belongs to root"), "{}", r.stderr);
}

#[test]
fn a_counters_subcommand_has_its_own_help() {
    let dir = TempDir::new("dsipc-habit-ch").unwrap();
    let r = dsipc_in(dir.path(), &["counters", "monitor", "--help"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout.starts_with("usage: dsipc counters monitor PID"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("counters collect"), "{}", r.stdout);
    assert!(!r.stdout.contains("counters export"), "{}", r.stdout);
}

/// `convert` after `trace --format speedscope` (whose profile took the default name) writes
/// the next free name instead of refusing or replacing; dotnet-trace's `--format NetTrace`
/// is the trace alone.
#[test]
fn convert_after_trace_format_takes_the_next_free_name() {
    let dir = TempDir::new("dsipc-habit-cv").unwrap();
    let stream: &'static [u8] = Box::leak(common::nettrace_stream(50_000).into_boxed_slice());
    let _rt = runtime(&dir, Config::new().stream(StreamSpec::content(stream)));
    let cwd = TempDir::new("dsipc-habit-cvc").unwrap();
    let pid = me();
    let (code, _, err) = dsipc_at(
        cwd.path(),
        dir.path(),
        &["trace", &pid, "-o", "t.nettrace", "--format", "speedscope"],
    );
    assert_eq!(code, Some(0), "{}", err);
    let first = fs::read(cwd.path().join("t.speedscope.json")).unwrap();
    let (code, _, err) = dsipc_at(cwd.path(), dir.path(), &["convert", "t.nettrace"]);
    assert_eq!(code, Some(0), "{}", err);
    assert!(err.contains("wrote t_2.speedscope.json"), "{}", err);
    assert_eq!(
        fs::read(cwd.path().join("t.speedscope.json")).unwrap(),
        first
    );
    let (code, _, err) = dsipc_at(
        cwd.path(),
        dir.path(),
        &["trace", &pid, "-o", "n.nettrace", "--format", "NetTrace"],
    );
    assert_eq!(code, Some(0), "{}", err);
    assert_eq!(
        files_in(cwd.path()),
        [
            "n.nettrace",
            "t.nettrace",
            "t.speedscope.json",
            "t_2.speedscope.json"
        ]
    );
}
