//! The one JSON writer, the trace layer's: serde_json over `#[derive(Serialize)]` types, with
//! strings escaped so that JSON read on a terminal cannot drive it (`info --json`,
//! `monitor --json`, `serve`, `convert`, `counters`).

pub use dsipc_trace::format::to_json as to_string;
