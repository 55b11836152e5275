//! What a process is called: the names `ps`, `-n/--name`, counters files and dotnet-monitor's
//! `/processes` show, from the one place each comes from.

/// The process's name as the system keeps it (`/proc/PID/comm`, at most 15 bytes, on
/// Linux); `None` where there is none to read.
pub fn process_name(pid: u32) -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        if let Ok(comm) = std::fs::read_to_string(format!("/proc/{}/comm", pid)) {
            let comm = comm.trim_end();
            if !comm.is_empty() {
                return Some(comm.to_string());
            }
        }
    }
    let _ = pid;
    None
}

/// The process's command line as the system keeps it (`/proc/PID/cmdline`, arguments
/// joined by spaces, on Linux); `None` where there is none to read.
pub fn command_line(pid: u32) -> Option<String> {
    #[cfg(target_os = "linux")]
    {
        let raw = std::fs::read(format!("/proc/{}/cmdline", pid)).ok()?;
        let parts: Vec<String> = raw
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !parts.is_empty() {
            return Some(parts.join(" "));
        }
    }
    let _ = pid;
    None
}

/// The file name of a command line's program, without `.exe` (any case), as dotnet-monitor
/// names a process: `"C:\Program Files\app.exe" --x` is `app`; `None` for an empty line.
pub fn program_name(command_line: &str) -> Option<String> {
    let line = command_line.trim_start();
    let program = match line.strip_prefix('"') {
        Some(rest) => rest.split('"').next().unwrap_or(""),
        None => line.split(' ').next().unwrap_or(""),
    };
    let file = program.rsplit(['/', '\\']).next().unwrap_or("");
    // (`get`: a name ending in a multi-byte character has no boundary 4 bytes back)
    let cut = file.len().saturating_sub(4);
    let stem = match (file.get(cut..), file.get(..cut)) {
        (Some(ext), Some(stem)) if cut > 0 && ext.eq_ignore_ascii_case(".exe") => stem,
        _ => file,
    };
    if stem.is_empty() {
        None
    } else {
        Some(stem.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_os = "linux")]
    #[test]
    fn command_line_of_this_process() {
        let line = command_line(std::process::id()).expect("our own command line");
        let program = std::env::args().next().unwrap();
        assert!(line.starts_with(&program), "{} / {}", line, program);
        assert_eq!(command_line(u32::MAX), None);
    }

    #[test]
    fn program_names_as_dotnet_monitor_takes_them() {
        assert_eq!(
            program_name(r#""C:\Program Files\App.EXE" --x"#).as_deref(),
            Some("App")
        );
        assert_eq!(
            program_name("/usr/bin/dotnet app.dll").as_deref(),
            Some("dotnet")
        );
        assert_eq!(program_name("  ").as_deref(), None);
        assert_eq!(program_name(r"C:\x\.exe").as_deref(), Some(".exe"));
        // Multi-byte characters where ".exe" would be: no panic, the name as it is.
        assert_eq!(program_name("/opt/ünï").as_deref(), Some("ünï"));
        assert_eq!(program_name("/opt/appé.EXE").as_deref(), Some("appé"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_has_a_name() {
        assert!(process_name(std::process::id()).map_or(false, |n| !n.is_empty()));
        assert_eq!(process_name(u32::MAX), None);
    }
}
