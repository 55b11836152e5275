//! The `Execute` action: a program run with its arguments, waited for within a bound; its
//! exit code is the action's `ExitCode`, and a non-zero one fails the action unless
//! `IgnoreExitCode` (dotnet-monitor's ExecuteAction).

use std::process::Stdio;
use std::time::Duration;

use super::actions::Outputs;
use crate::rules::outputs::EXIT_CODE;

/// The longest an `Execute` program may run before it is killed and the action fails.
/// dotnet-monitor waits as long as the rule runs; serve bounds it so that a program that
/// never exits cannot hold its rule in ActionExecuting (and a process slot) for ever. Ten
/// minutes leave room for what such hooks do (upload an artifact, notify someone).
pub(super) const EXECUTE_TIMEOUT: Duration = Duration::from_secs(600);

/// The most arguments a command line is split into (a command line the OS takes holds a
/// few thousand at most; past this the text is not a command line).
const MAX_ARGUMENTS: usize = 4096;

/// Splits `text` as .NET's `ProcessStartInfo.Arguments` does: on spaces and tabs, with
/// `"..."` grouping and `\"` a literal quote.
pub(super) fn split_arguments(text: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut has = false;
    let mut quoted = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'"') => {
                chars.next();
                current.push('"');
                has = true;
            }
            '"' => {
                quoted = !quoted;
                has = true;
            }
            ' ' | '\t' if !quoted => {
                if has {
                    out.push(std::mem::take(&mut current));
                    has = false;
                }
            }
            c => {
                current.push(c);
                has = true;
            }
        }
        if out.len() > MAX_ARGUMENTS {
            return Err(format!("more than {} arguments", MAX_ARGUMENTS));
        }
    }
    if has {
        out.push(current);
    }
    Ok(out)
}

/// Runs `path` with `arguments`.
pub(super) async fn run(
    path: &str,
    arguments: Option<&str>,
    ignore_exit_code: bool,
) -> Result<Outputs, String> {
    if !std::path::Path::new(path).is_file() {
        return Err(format!("The file '{}' does not exist.", path));
    }
    let args = split_arguments(arguments.unwrap_or(""))?;
    let mut child = tokio::process::Command::new(path)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {}", path, e))?;
    let status = match tokio::time::timeout(EXECUTE_TIMEOUT, child.wait()).await {
        Ok(s) => s.map_err(|e| format!("waiting for {}: {}", path, e))?,
        Err(_) => {
            let _ = child.kill().await;
            return Err(format!(
                "{} did not exit within {} s; it was killed",
                path,
                EXECUTE_TIMEOUT.as_secs()
            ));
        }
    };
    let code = status
        .code()
        .ok_or_else(|| format!("{} was ended by a signal ({})", path, status))?;
    if code != 0 && !ignore_exit_code {
        return Err(format!("The process exited with exit code {}.", code));
    }
    let mut out = Outputs::new();
    out.insert(EXIT_CODE.into(), code.to_string());
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::split_arguments;

    #[test]
    fn execute_arguments_split_as_dotnet_process_start_info() {
        assert_eq!(
            split_arguments(r#"a "b c"  d\"e "" f"#).unwrap(),
            ["a", "b c", "d\"e", "", "f"]
        );
        assert!(split_arguments("").unwrap().is_empty());
        assert!(split_arguments(&"x ".repeat(5000)).is_err());
    }
}
