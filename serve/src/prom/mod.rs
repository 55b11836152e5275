//! Prometheus: a store of counter samples rendered in the text exposition format with
//! dotnet-monitor's metric names ([`Store`]), the `/metrics` listener of a process of its
//! own ([`listener::Server`]), the one counters session that feeds a store
//! ([`spawn_session`]) and an exporter of any number of runtimes' counters ([`Exporter`]).

mod exporter;
pub mod listener;
mod session;
mod store;

pub use exporter::{Collector, Exporter, ExporterOptions};
pub use session::spawn_session;
pub use store::Store;
