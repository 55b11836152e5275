//! Prometheus: a store of counter samples rendered in the text exposition format with
//! dotnet-monitor's metric names ([`Store`]), the `/metrics` listener of a process of its
//! own ([`listener::Server`]) and the one counters session that feeds a store
//! ([`spawn_session`]).

pub mod listener;
mod session;
mod store;

pub use session::spawn_session;
pub use store::Store;
