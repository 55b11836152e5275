//! `ps`: one deadline, parallel probes, owner check; `--timeout` is the whole command's
//! budget.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config, FakeRuntime, TempDir};

use super::start_key;
use crate::common::{dsipc_in, fake, me};

// ---- ps: one deadline, parallel probes, owner check ----

/// `n` child processes that live until dropped.
struct Sleepers(Vec<Child>);

impl Sleepers {
    fn spawn(n: usize) -> Sleepers {
        Sleepers(
            (0..n)
                .map(|_| {
                    Command::new("sleep")
                        .arg("300")
                        .stdin(Stdio::null())
                        .spawn()
                        .unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Sleepers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[test]
fn ps_probes_silent_sockets_in_parallel_under_one_deadline() {
    let sleepers = Sleepers::spawn(60);
    let dir = TempDir::new("dsipc-h7").unwrap();
    let _fakes: Vec<FakeRuntime> = sleepers
        .0
        .iter()
        .map(|c| {
            fake(
                &dir,
                Config::new()
                    .pid(u64::from(c.id()))
                    .key(start_key(c.id()))
                    .default_answer(Answer::Hang),
            )
        })
        .collect();
    let r = dsipc_in(dir.path(), &["ps", "--timeout", "0.5"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = r.stdout;
    for c in &sleepers.0 {
        let pid = c.id().to_string();
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().next() == Some(pid.as_str())),
            "{} not listed:\n{}",
            pid,
            out
        );
    }
    // The bound is the point: one after another, 60 probes take 30 s.
    assert!(r.took < Duration::from_secs(10), "ps took {:?}", r.took);
}

#[test]
fn ps_and_info_ignore_a_socket_not_owned_by_the_process_uid() {
    let sleepers = Sleepers::spawn(1);
    let dir = TempDir::new("dsipc-h7o").unwrap();
    let my_uid = unsafe { libc::geteuid() };
    // A legitimate socket: the process's own uid.
    let good = &sleepers.0[0];
    let _good = fake(
        &dir,
        Config::new()
            .pid(u64::from(good.id()))
            .key(start_key(good.id())),
    );
    // A planted one: named after a process of another uid (as root, the file is given away).
    let (victim, _victims) = if my_uid == 0 {
        let s = Sleepers::spawn(1);
        (s.0[0].id(), Some(s))
    } else {
        let other = fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                fs::read_to_string(format!("/proc/{}/status", pid))
                    .ok()
                    .and_then(|s| {
                        s.lines().find(|l| l.starts_with("Uid:")).map(|l| {
                            !l.split_whitespace()
                                .skip(1)
                                .any(|u| u == my_uid.to_string())
                        })
                    })
                    .unwrap_or(false)
            })
            .expect("a process of another uid");
        (other, None)
    };
    let planted = fake(
        &dir,
        Config::new()
            .pid(u64::from(victim))
            .key(start_key(victim))
            .command_line("planted"),
    );
    if my_uid == 0 {
        let c =
            std::ffi::CString::new(planted.socket_path().unwrap().as_os_str().as_bytes()).unwrap();
        // SAFETY: chown with a valid C string.
        assert_eq!(unsafe { libc::chown(c.as_ptr(), 65534, 65534) }, 0);
    }
    let r = dsipc_in(dir.path(), &["ps"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let out = r.stdout;
    let listed = |pid: u32| {
        out.lines()
            .any(|l| l.split_whitespace().next() == Some(pid.to_string().as_str()))
    };
    assert!(listed(good.id()), "{}", out);
    assert!(!listed(victim), "planted socket listed:\n{}", out);
    assert!(!out.contains("planted"), "{}", out);
    let r = dsipc_in(dir.path(), &["info", &victim.to_string()]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!r.stdout.contains("planted"), "{}", r.stdout);
}

// ---- --timeout is the whole command's budget ----

#[test]
fn info_and_dump_timeout_bounds_all_fallbacks_together() {
    let dir = TempDir::new("dsipc-h8").unwrap();
    // A slow 3.1-style runtime: every ProcessInfo version is unknown, each answer late.
    let rt = fake(
        &dir,
        Config::new()
            .like_netcore31()
            .reply_delay(Duration::from_millis(600)),
    );
    let r = dsipc_in(dir.path(), &["info", &me(), "--timeout", "1"]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    // Per attempt, all three would fit (0.6 s < 1 s) and end with "does not support".
    assert!(r.stderr.contains("timed out after 1.0 s"), "{}", r.stderr);
    assert!(rt.received().len() <= 2, "{:?}", rt.received());
    // The same for dump's fallbacks (GenerateCoreDump3, 2, then 1).
    let dir = TempDir::new("dsipc-h8d").unwrap();
    let rt = fake(
        &dir,
        Config::new()
            .answer(Cmd::GenerateCoreDump3, Answer::unknown_command())
            .answer(Cmd::GenerateCoreDump2, Answer::unknown_command())
            .reply_delay(Duration::from_millis(600)),
    );
    let r = dsipc_in(
        dir.path(),
        &["dump", &me(), "-o", "/tmp/never.dmp", "--timeout", "1"],
    );
    r.assert_exit(1, &["timed out after 1.0 s"]);
    assert!(rt.received().len() <= 2, "{:?}", rt.received());
}
