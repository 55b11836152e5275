//! dotnet-monitor's HTTP API over the .NET Diagnostic IPC protocol, as a library: the
//! routes (processes, traces, dumps, gcdumps, stacks, logs, live metrics, operations and
//! egress), API-key authentication, process discovery and Prometheus `/metrics`, served by a
//! [`Server`] on listeners the caller owns. `dsipc serve` is a thin caller of this crate.
//!
//! ```no_run
//! # async fn run() -> Result<(), dsipc_serve::ServeError> {
//! use dsipc_serve::{Auth, Options, Server};
//!
//! let mut options = Options::default();
//! options.auth = Auth::Off; // dotnet-monitor's --no-auth: say NO_AUTH_WARNING
//! let mut server = Server::new(options, 1)?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:52323").await.unwrap();
//! server.serve_api(listener);
//! tokio::signal::ctrl_c().await.ok(); // serves until the server is dropped
//! # Ok(())
//! # }
//! ```
//!
//! Given dotnet-monitor's `CollectionRules` ([`Options::collection_rules`]), the server runs
//! them on every runtime it discovers and answers `/collectionrules` ([`rules`] is their
//! sans-IO engine).
//!
//! The pieces a service may use alone: [`prom`] (a Prometheus store of counter samples, its
//! `/metrics` listener and the counters session feeding it), [`http`] (hyper listeners with
//! bounded connections and request heads within a deadline).
#![deny(missing_docs)]

mod api;
pub mod auth;
mod collection;
pub mod config;
mod dump;
pub mod egress;
mod error;
mod exceptions;
mod fds;
pub mod http;
mod json;
mod livemetrics;
mod logs;
mod metrics;
mod models;
mod operations;
mod procs;
mod profiles;
pub mod prom;
pub mod rules;
mod secret;
mod server;
mod session;

pub use egress::EgressTarget;
pub use error::ServeError;
pub use livemetrics::valid_name as valid_counter_name;
pub use operations::{parse_egress, Egress};
pub use procs::DefaultFilter;
pub use secret::{Secret, REDACTED};
pub use server::{
    parse_urls, Auth, ListenAddr, Options, Server, DEFAULT_METRICS_URLS, DEFAULT_URLS,
    NO_AUTH_WARNING,
};
