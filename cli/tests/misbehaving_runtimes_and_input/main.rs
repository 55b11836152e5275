//! The `dsipc` binary against misbehaving runtimes and hostile input: the fake
//! runtime of dsipc-testkit in its hostile modes (refusing, stale, silent, slow, streams
//! that end too early or never end, stops that fail or are ignored, environments that
//! announce gigabytes, strings with control characters), planted sockets, non-UTF-8 and
//! empty arguments, and a failing stdout.
//!
//! Every run is bounded by a generous limit that only catches hangs; tests synchronise on
//! the lines dsipc prints, never on sleeps.
#![cfg(target_os = "linux")]

mod arguments;
#[path = "../common/mod.rs"]
mod common;
mod env;
mod output;
mod ps_and_timeout;
mod stopping;
mod trace_files;

use dsipc::Command as Cmd;
use dsipc_testkit::{Answer, Config};

/// The N of "kept the N bytes" in dsipc's message.
/// A real trace (the committed .NET 8 CPU capture): the parser decides where a stream ends,
/// so the streams that must end cleanly are real ones.
const BUSY: &[u8] = include_bytes!("../../../tests/data/nettrace/net8.0.4-busy.nettrace");

fn kept_bytes(stderr: &str) -> u64 {
    let at = stderr
        .find("kept the ")
        .unwrap_or_else(|| panic!("no 'kept the N bytes' in {}", stderr));
    stderr[at + 9..]
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no byte count in {}", stderr))
}

fn start_key(pid: u32) -> u64 {
    dsipc_std::unix::start_key(pid).expect("start key")
}

/// A fake runtime whose answer to `cmd` never comes.
fn hanging(cmd: Cmd) -> Config {
    Config::new().answer(cmd, Answer::Hang)
}
