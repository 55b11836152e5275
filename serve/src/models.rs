//! dotnet-monitor's models (Microsoft.Diagnostics.Monitoring.WebApi.Models) as serve writes
//! them: `#[derive(Serialize)]` with dotnet-monitor's field names and order, written by the
//! one JSON writer (`crate::json::to_string`).

use serde::{Serialize, Serializer};

/// `ProcessIdentifier`: an item of `GET /processes`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessIdentifier<'a> {
    pub pid: u32,
    pub uid: &'a str,
    pub name: &'a str,
    pub is_default: bool,
}

/// `ProcessInfo`: `GET /process`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProcessInfo<'a> {
    pub pid: u32,
    pub uid: &'a str,
    pub name: &'a str,
    pub command_line: &'a str,
    pub operating_system: String,
    pub process_architecture: String,
    pub managed_entry_point_assembly_name: Option<&'a str>,
}

/// `DotnetMonitorInfo`: `GET /info`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DotnetMonitorInfo<'a> {
    pub version: String,
    pub runtime_version: Option<&'a str>,
    pub diagnostic_port_mode: &'static str,
    pub diagnostic_port_name: Option<String>,
    pub capabilities: &'a [MonitorCapability],
}

/// `MonitorCapability`: a feature and whether this server has it.
#[derive(Serialize)]
pub struct MonitorCapability {
    pub name: &'static str,
    pub enabled: bool,
}

/// `OperationProcessInfo`: the process an operation collects from.
#[derive(Serialize)]
pub struct OperationProcessInfo<'a> {
    pub pid: u32,
    pub uid: &'a str,
    pub name: &'a str,
}

/// `OperationSummary`: an item of `GET /operations`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationSummary<'a> {
    pub operation_id: &'a str,
    pub created_date_time: String,
    pub status: &'static str,
    pub process: OperationProcessInfo<'a>,
    pub egress_provider_name: &'a str,
    pub is_stoppable: bool,
    pub tags: &'a [String],
}

/// `OperationStatus`: `GET /operations/{id}`, the summary after its result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OperationStatus<'a> {
    pub resource_location: Option<&'a str>,
    pub error: Option<OperationError<'a>>,
    #[serde(flatten)]
    pub summary: OperationSummary<'a>,
}

/// `OperationError`: why an operation failed.
#[derive(Serialize)]
pub struct OperationError<'a> {
    pub code: &'static str,
    pub message: &'a str,
}

/// `Metric`: a record of `GET /livemetrics` (dotnet-monitor's CounterPayload writer).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metric<'a> {
    pub timestamp: String,
    pub provider: &'a str,
    pub name: &'a str,
    pub display_name: &'a str,
    pub unit: &'a str,
    pub counter_type: &'static str,
    pub tags: String,
    /// `null` when not finite (JSON has no NaN).
    pub value: f64,
}

/// `ProblemDetails` / `ValidationProblemDetails` (`application/problem+json`).
#[derive(Serialize)]
pub struct ProblemDetails<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub title: &'static str,
    pub status: u16,
    pub detail: &'a str,
    /// Per-parameter messages, `{"field": ["message"]}`; left out when none.
    #[serde(skip_serializing_if = "Errors::is_empty")]
    pub errors: Errors<'a>,
}

/// ValidationProblemDetails' `errors`: a field's name and its message.
pub struct Errors<'a>(pub &'a [(String, String)]);

impl Errors<'_> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Serialize for Errors<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(
            self.0
                .iter()
                .map(|(field, message)| (field, std::slice::from_ref(message))),
        )
    }
}

/// `GET /env`: the variables as one object, in the runtime's order (`NAME=value` each).
pub struct Environment<'a>(pub &'a [String]);

impl Serialize for Environment<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(
            self.0
                .iter()
                .map(|v| v.split_once('=').unwrap_or((v.as_str(), ""))),
        )
    }
}
