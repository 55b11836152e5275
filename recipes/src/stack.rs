//! dotnet-stack's session: every thread's managed stack, sampled once and resolved.
//!
//! A short EventPipe session with `Microsoft-DotNETCore-SampleProfiler` (and
//! `Microsoft-Windows-DotNETRuntime`'s loader and JIT events) asking for rundown, stopped
//! as soon as every thread has a sample (dotnet-stack stops after a fixed 10 ms); the rundown
//! the runtime writes at the stop names the methods the samples hit. The analysis (each
//! thread's latest sample, resolved) is dsipc-trace's [`StackSnapshot`].
//!
//! Text ([`text`]): one block per thread, `Thread (0x{TID}):`, then its frames innermost
//! first, each `  Module!Namespace.Type.Method(args)` or `  [Native Frames]` for a run of
//! frames no method record covers, then a blank line. JSON ([`json`]): dotnet-monitor's
//! `CallStackResult`.

use std::time::Duration;

use dsipc::session::providers::ProviderSpec;
use dsipc_trace::format::{clean, to_json};
use dsipc_trace::{LiveProfile, StackFrame, StackSnapshot};

use crate::collect::{Collect, End, Request};
use crate::RecipeError;

/// SampleProfiler's keywords and level as dotnet-stack asks (none; Informational).
const SAMPLE_PROFILER: &str = "Microsoft-DotNETCore-SampleProfiler";
/// The runtime provider: Loader (0x8) and Jit (0x10), whose method and module records name
/// methods compiled or loaded during the session.
const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
const RUNTIME_KEYWORDS: u64 = 0x18;
const INFORMATIONAL: u32 = 4;

/// At the latest, the session is stopped this long after it started (or at half the
/// timeout, if shorter), samples or not. Normally it stops at the first complete round of
/// the sampler, a few hundred milliseconds in (the runtime flushes its buffers about every
/// 100 ms).
pub const STOP_AT_THE_LATEST: Duration = Duration::from_secs(1);

/// The GUID dotnet-monitor writes when it has no module version id (EventPipe's module
/// records do not carry the MVID).
const NIL_GUID: &str = "00000000-0000-0000-0000-000000000000";

/// dotnet-stack's session as a [`Collect`]: SampleProfiler and the runtime's loader and JIT
/// events with rundown, stopped once the sampler went round every thread (one thread has
/// two samples) or at [`STOP_AT_THE_LATEST`] (half the timeout if shorter).
pub struct Sampling {
    live: LiveProfile,
    pid: u32,
    timeout: Duration,
}

impl Sampling {
    /// Sampling runtime `pid`, whose whole answer is due within `timeout`.
    pub fn new(pid: u32, timeout: Duration) -> Sampling {
        Sampling {
            live: LiveProfile::new(),
            pid,
            timeout,
        }
    }
}

impl Collect for Sampling {
    type Output = StackSnapshot;

    fn request(&self) -> Request {
        let spec = |name: &str, keywords| ProviderSpec {
            name: name.to_string(),
            keywords,
            level: INFORMATIONAL,
            args: None,
        };
        Request {
            providers: vec![spec(SAMPLE_PROFILER, 0), spec(RUNTIME, RUNTIME_KEYWORDS)],
            buffer_mb: 256,
            rundown: true,
        }
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        self.live
            .feed(data)
            .map_err(|e| RecipeError::Failed(format!("the stream did not parse: {}", e)))
    }

    fn enough(&mut self, elapsed: Duration) -> bool {
        // One thread sampled twice: the sampler went round every thread.
        self.live.analyzer().max_thread_samples() >= 2
            || elapsed >= STOP_AT_THE_LATEST.min(self.timeout / 2)
    }

    fn finish(mut self, end: End, stop_asked: bool) -> Result<StackSnapshot, RecipeError> {
        let pid = self.pid;
        match end {
            End::Stream(_) => {}
            End::TimedOut => {
                return Err(RecipeError::Failed(format!(
                    "pid {}: no complete answer within {:.1} s (--timeout): the runtime {}",
                    pid,
                    self.timeout.as_secs_f64(),
                    if stop_asked {
                        "did not finish the session after the stop"
                    } else {
                        "sent no samples"
                    }
                )))
            }
            End::Failed(e) => return Err(RecipeError::Ipc(e)),
        }
        if let Err(e) = self.live.finish() {
            let why = if e.is_truncation() {
                format!(
                    "the runtime ended the stream {}without its end-of-stream object (did pid {} exit?): {}",
                    if stop_asked { "" } else { "before the stop and " },
                    pid,
                    e
                )
            } else {
                format!("the stream did not parse: {}", e)
            };
            return Err(RecipeError::Failed(why));
        }
        if let Some(limit) = self.live.analyzer().limit_error() {
            return Err(RecipeError::Failed(format!(
                "the trace went past a limit: {}",
                limit
            )));
        }
        Ok(self.live.into_stacks())
    }
}

/// dotnet-stack's report: per thread `Thread (0x{TID:X}):`, frames innermost first
/// indented two spaces, a blank line. Runtime-supplied names go through [`clean`].
pub fn text(s: &StackSnapshot) -> String {
    let mut out = String::new();
    for t in &s.threads {
        out.push_str(&format!("Thread (0x{:X}):\n", t.thread_id));
        for f in &t.frames {
            out.push_str("  ");
            out.push_str(&clean(&f.display_name()));
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// dotnet-monitor's `CallStackResult`, one line. Of each frame: `methodName` (the
/// runtime's MethodName), `methodToken` (MethodToken; 0 for dynamic methods),
/// `parameterTypes` (the signature's, as the runtime writes them: `int32`,
/// `class System.String`), `typeName` (MethodNamespace: the declaring type's full name),
/// `moduleName` (the IL file name without extension; empty when no module record named
/// it) and `moduleVersionId` (always the nil GUID: EventPipe's module records carry no MVID).
/// A run of frames no method covers is one frame named `[Native Frames]` with empty names
/// and token 0. `threadName` is what `name` finds (empty when nothing).
pub fn json(s: &StackSnapshot, name: &dyn Fn(u64) -> String) -> String {
    let stacks = s
        .threads
        .iter()
        .map(|t| CallStack {
            thread_id: t.thread_id,
            thread_name: name(t.thread_id),
            frames: t
                .frames
                .iter()
                .map(|f| match f {
                    StackFrame::Method(m) => CallStackFrame {
                        method_name: m.method.clone(),
                        method_token: m.token,
                        parameter_types: m.parameter_types(),
                        type_name: m.type_name.clone(),
                        module_name: m.module.clone().unwrap_or_default(),
                        module_version_id: NIL_GUID,
                    },
                    StackFrame::Native => CallStackFrame {
                        method_name: dsipc_trace::NATIVE_FRAMES.to_string(),
                        method_token: 0,
                        parameter_types: Vec::new(),
                        type_name: String::new(),
                        module_name: String::new(),
                        module_version_id: NIL_GUID,
                    },
                })
                .collect(),
        })
        .collect();
    to_json(&CallStackResult { stacks }) + "\n"
}

/// dotnet-monitor's `CallStackResult`.
#[derive(serde::Serialize)]
struct CallStackResult {
    stacks: Vec<CallStack>,
}

/// dotnet-monitor's `CallStack`: one thread's.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct CallStack {
    thread_id: u64,
    thread_name: String,
    frames: Vec<CallStackFrame>,
}

/// dotnet-monitor's `CallStackFrame`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct CallStackFrame {
    method_name: String,
    method_token: u32,
    parameter_types: Vec<String>,
    type_name: String,
    module_name: String,
    module_version_id: &'static str,
}

/// The name the OS has for thread `tid` of `pid` (.NET gives it the managed thread's name,
/// cut to 15 bytes): `/proc/PID/task/TID/comm` on Linux, when the process is in this pid
/// namespace (the runtime reports its own thread ids); empty otherwise.
pub fn thread_name(pid: u32, tid: u64) -> String {
    #[cfg(target_os = "linux")]
    {
        let status = std::fs::read_to_string(format!("/proc/{}/status", pid)).unwrap_or_default();
        let same_namespace = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .map_or(false, |v| v.split_whitespace().count() == 1);
        if same_namespace {
            if let Ok(name) = std::fs::read_to_string(format!("/proc/{}/task/{}/comm", pid, tid)) {
                return name.trim_end_matches('\n').to_string();
            }
        }
        String::new()
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (pid, tid);
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsipc_trace::{MethodName, SampleKind, ThreadStack};

    fn snapshot() -> StackSnapshot {
        StackSnapshot {
            threads: vec![ThreadStack {
                thread_id: 0x2a,
                timestamp: 1,
                kind: SampleKind::External,
                samples: 2,
                frames: vec![
                    StackFrame::Method(MethodName {
                        module: Some("System.Private.CoreLib".into()),
                        type_name: "System.Threading.Thread".into(),
                        method: "Sleep".into(),
                        signature: "void  (int32)".into(),
                        token: 0x0600_0001,
                    }),
                    StackFrame::Native,
                    StackFrame::Method(MethodName {
                        module: None,
                        type_name: "Evil\u{1b}[2J".into(),
                        method: "M\"".into(),
                        signature: String::new(),
                        token: 0,
                    }),
                ],
            }],
            distinct_ips: 3,
            unresolved_ips: 1,
        }
    }

    #[test]
    fn text_is_dotnet_stacks_report_with_names_cleaned() {
        assert_eq!(
            text(&snapshot()),
            "Thread (0x2A):\n  System.Private.CoreLib!System.Threading.Thread.Sleep(int32)\n  [Native Frames]\n  ?!Evil\\x1b[2J.M\"\n\n"
        );
    }

    #[test]
    fn json_is_a_call_stack_result() {
        let j = json(&snapshot(), &|tid| format!("t{}", tid));
        assert_eq!(
            j,
            concat!(
                "{\"stacks\":[{\"threadId\":42,\"threadName\":\"t42\",\"frames\":[",
                "{\"methodName\":\"Sleep\",\"methodToken\":100663297,\"parameterTypes\":[\"int32\"],",
                "\"typeName\":\"System.Threading.Thread\",\"moduleName\":\"System.Private.CoreLib\",",
                "\"moduleVersionId\":\"00000000-0000-0000-0000-000000000000\"},",
                "{\"methodName\":\"[Native Frames]\",\"methodToken\":0,\"parameterTypes\":[],",
                "\"typeName\":\"\",\"moduleName\":\"\",",
                "\"moduleVersionId\":\"00000000-0000-0000-0000-000000000000\"},",
                "{\"methodName\":\"M\\\"\",\"methodToken\":0,\"parameterTypes\":[],",
                "\"typeName\":\"Evil\\u001b[2J\",\"moduleName\":\"\",",
                "\"moduleVersionId\":\"00000000-0000-0000-0000-000000000000\"}",
                "]}]}\n"
            )
        );
    }
}
