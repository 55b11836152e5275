//! The fuzz harness of dsipc: one function per fuzz target, each taking the raw fuzzer input.
//!
//! The `fuzz_targets/*.rs` binaries are one-line wrappers around these functions, and
//! `tests/corpus.rs` calls the same functions over the seed corpus (`corpus-seeds/<target>/`)
//! and the regression inputs (`regressions/<target>/`) with a plain `cargo test`, so a crash
//! the fuzzer found stays covered without libFuzzer.
//!
//! Every function asserts properties, not just "no panic": decoders re-encode what they
//! accept to the same bytes, the client machine reports the same events however its input
//! is fragmented, arbitrary requests and responses survive encode → decode, and the UTF-16
//! conversions agree with std's, and a session ends the same way however its runtime's
//! bytes arrive.

mod client;
mod fields;
mod fragment;
mod heap;
mod messages;
mod nettrace;
mod server;
mod session;
mod text;
mod trace_layer;
mod util;

pub use client::*;
pub use fields::*;
pub use fragment::*;
pub use heap::*;
pub use messages::*;
pub use nettrace::*;
pub use server::*;
pub use session::*;
pub use text::*;
pub use trace_layer::*;

use dsipc::wire::MAX_MESSAGE_LEN;

/// A harness function: takes the raw fuzzer input, panics on a finding.
pub type Target = fn(&[u8]);

/// The names of every target, in the order of `Cargo.toml` (used by the corpus test and
/// `scripts/fuzz-ci.sh`).
pub const TARGETS: &[(&str, Target)] = &[
    ("header", header),
    ("advertise", advertise),
    ("reply", reply),
    ("request", request),
    ("transport", transport),
    ("client", client),
    ("roundtrip_request", roundtrip_request),
    ("roundtrip_response", roundtrip_response),
    ("utf16", utf16),
    ("server", server),
    ("nettrace", nettrace),
    ("nettrace_fields", nettrace_fields),
    ("trace_layer", trace_layer),
    ("heap_stream", heap_stream),
    ("gcdump", gcdump),
    ("session", session),
];

/// Largest `needed` a `Status::Partial` may report for a message (documented on
/// `dsipc::Status`: the `u16` size field). A ProcessEnvironment entry may need more, but never
/// more than the block size the reply announced.
pub const MAX_NEEDED: usize = MAX_MESSAGE_LEN;
