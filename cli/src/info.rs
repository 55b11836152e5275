//! `dsipc info PID [--json]`: the runtime's ProcessInfo (dotnet-monitor's `/process`).

use std::ffi::OsString;

use dsipc_std::ProcessInfo;

use crate::error::CliResult;
use crate::term::clean;
use crate::{json, pid_command, print_out};

pub(crate) fn cmd_info(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID"], &[], &["--json"])?;
    let info = common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .process_info()?;
    let text = if p.flag("--json") {
        info_json(&info)
    } else {
        info_text(&info)
    };
    print_out(&text)
}

fn info_text(info: &ProcessInfo) -> String {
    let opt = |o: &Option<String>| match o {
        Some(s) if s.is_empty() => "(empty)".to_string(),
        Some(s) => clean(s).into_owned(),
        None => "(not reported)".to_string(),
    };
    format!(
        "pid:                 {}\n\
         cookie:              {}\n\
         command line:        {}\n\
         os:                  {}\n\
         arch:                {}\n\
         entrypoint assembly: {}\n\
         clr version:         {}\n\
         runtime identifier:  {}\n\
         answered by:         {}\n",
        info.pid,
        info.cookie,
        clean(&info.command_line),
        clean(&info.os),
        clean(&info.arch),
        opt(&info.entrypoint_assembly),
        opt(&info.clr_version),
        opt(&info.runtime_identifier),
        info.command,
    )
}

/// `dsipc info --json`'s object (snake_case: dsipc's own format).
#[derive(serde::Serialize)]
struct InfoJson<'a> {
    pid: u64,
    cookie: String,
    command_line: &'a str,
    os: &'a str,
    arch: &'a str,
    entrypoint_assembly: Option<&'a str>,
    clr_version: Option<&'a str>,
    runtime_identifier: Option<&'a str>,
    command: &'static str,
}

fn info_json(info: &ProcessInfo) -> String {
    json::to_string(&InfoJson {
        pid: info.pid,
        cookie: info.cookie.to_string(),
        command_line: &info.command_line,
        os: &info.os,
        arch: &info.arch,
        entrypoint_assembly: info.entrypoint_assembly.as_deref(),
        clr_version: info.clr_version.as_deref(),
        runtime_identifier: info.runtime_identifier.as_deref(),
        command: info.command.name(),
    }) + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsipc::wire::Guid;

    #[test]
    fn json_has_nulls_for_missing_fields() {
        let mut info = ProcessInfo::new(dsipc::wire::Command::ProcessInfo, 7, Guid::NIL);
        info.command_line = "a \"b\"\n".into();
        info.os = "Linux".into();
        info.arch = "x64".into();
        let j = info_json(&info);
        assert!(j.contains("\"pid\":7"), "{}", j);
        assert!(j.contains("\"command_line\":\"a \\\"b\\\"\\n\""), "{}", j);
        assert!(j.contains("\"clr_version\":null"), "{}", j);
        let t = info_text(&info);
        assert!(t.contains("command line:        a \"b\"\\n\n"), "{}", t);
    }
}
