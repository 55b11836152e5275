//! README.md's dotnet-* → dsipc table, run as written: every dsipc line, in order, against a
//! real .NET 8 and a real .NET Core 3.1 runtime (PID replaced by the runtime's pid), each
//! runtime in a directory of its own. Lines that run until stopped (`counters monitor`,
//! `serve`) are stopped with Ctrl-C once they have shown what they are for.
#![cfg(target_os = "linux")]

mod common;

use std::process::Command;
use std::time::Duration;

use common::{bin, configure_python, temp_dir, Live};
use dsipc_testkit::{HostOptions, HostedRuntime};

/// The dsipc column of the table between README's cheat-sheet markers.
fn cheat_sheet() -> Vec<String> {
    let readme = std::fs::read_to_string(common::repo_root().join("README.md")).unwrap();
    let start = readme
        .find("<!-- cheat-sheet -->")
        .expect("cheat-sheet marker");
    let end = readme
        .find("<!-- /cheat-sheet -->")
        .expect("cheat-sheet end marker");
    readme[start..end]
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            cells[2].trim_matches('`').to_string()
        })
        .collect()
}

/// Runs one line in `dir` for `pid`, bounded; the lines that run until stopped are stopped
/// once they showed `shown`.
fn run_line(line: &str, pid: u32, dir: &std::path::Path) {
    let words: Vec<String> = line
        .split_whitespace()
        .map(|w| w.replace("PID", &pid.to_string()))
        .collect();
    assert_eq!(words[0], "dsipc", "{}", line);
    let mut cmd = Command::new(bin());
    cmd.current_dir(dir).args(&words[1..]);
    let until_stopped = match (words[1].as_str(), words.get(2).map(String::as_str)) {
        ("counters", Some("monitor")) => Some(("stdout", "CPU Usage")),
        // serve on its own port: dotnet-monitor's default may be taken by a parallel test.
        ("serve", _) => {
            cmd.args([
                "--urls",
                &format!("http://127.0.0.1:{}", common::free_port()),
            ]);
            Some(("stderr", "http://127.0.0.1:"))
        }
        _ => None,
    };
    match until_stopped {
        Some((stream, shown)) => {
            let mut live = Live::spawn(cmd);
            if stream == "stdout" {
                live.wait_stdout(shown, common::LIMIT);
            } else {
                live.stderr_line(shown, common::LIMIT);
            }
            let r = live.interrupt(common::LIMIT);
            assert_eq!(r.code, Some(0), "{}: {}", line, r.stderr);
        }
        None => {
            let r = Live::spawn(cmd).wait(Duration::from_secs(120));
            assert_eq!(r.code, Some(0), "{}: {}", line, r.stderr);
        }
    }
}

fn check(runtime: &str) {
    configure_python();
    let mut o = HostOptions::net8(300);
    o.runtime = runtime.to_string();
    o.args = vec!["--counters".into()];
    let mut h = HostedRuntime::spawn(&o).expect("spawn host");
    let pid = h
        .wait_ready(Duration::from_secs(90))
        .expect("host ready")
        .pid;
    let dir = temp_dir(&format!("cheat-{}", runtime));
    let lines = cheat_sheet();
    assert!(lines.len() >= 10, "{:?}", lines);
    for line in &lines {
        run_line(line, pid, &dir);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn net8_runs_every_line_of_the_cheat_sheet() {
    check("net8");
}

#[test]
fn netcore31_runs_every_line_of_the_cheat_sheet() {
    check("netcore31");
}
