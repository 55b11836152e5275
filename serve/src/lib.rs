//! dotnet-monitor's HTTP API over the .NET Diagnostic IPC protocol, as a library: its
//! configuration (`settings.json`, `DotnetMonitor_` environment variables, key-per-file
//! folders), collection rules and egress. `dsipc serve` is a thin caller of this crate.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod egress;
