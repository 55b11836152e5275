//! `dsipc trace`: an EventPipe session into a `.nettrace` file.
//!
//! Nothing on disk changes unless the session started: FILE (and the profile with
//! `--format`) follow the CLI's one output policy ([`crate::output`]): a temporary file
//! beside FILE, put in place after the runtime's OK reply and removed if the session does
//! not start; an existing FILE is replaced only with `--force`. Nothing this command did
//! not create is ever removed.
//!
//! The stream is also parsed as it arrives (a [`LiveProfile`]: the receive buffer is bounded
//! by the parser's maximum block size, memory by the distinct metadata, methods and stacks,
//! never by trace length), always, because parsing costs little next to the runtime's
//! rate: it gives the progress line its event, sample and lost-event counts. With
//! `--format speedscope|folded|pprof|flamegraph` the profile of what was parsed is written
//! beside the trace at the end (same stem, the format's extension, through a temporary file
//! renamed into place). A stream that does not parse never costs the trace: the
//! `.nettrace` keeps every byte received; with `--format` the command then fails (after
//! writing the profile of what preceded the bad bytes, if anything did), without it a
//! warning says the counts stopped.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};

use dsipc::session::providers::CollectArgs;
use dsipc_recipes::trace::{start, Counting, Ending, Live, Parsed, ToFile, Traced, Watch};
use dsipc_recipes::{End, Request, Tick};
use dsipc_std::Error;

use crate::convert::live::{self, LiveCounts, LiveProfile, ProfileFormat};
use crate::output::{display, Output};
use crate::term::{self, clean, note, note_inline};
use crate::{args, pid_command, CliError, CliResult};

/// Ctrl-C and the progress line on a terminal, as `dsipc trace`'s [`ToFile`] asks them:
/// stopped on Ctrl-C, abandoned on a second.
struct Terminal {
    tty: bool,
    /// When the progress line was last written (since the session started).
    last_print: Duration,
}

impl Watch for Terminal {
    fn stop_requested(&mut self) -> bool {
        term::interrupted()
    }

    fn quit(&self) -> bool {
        term::interrupts() >= 2
    }

    fn stop_before_start(&mut self) {
        note!("dsipc: interrupted while the runtime has not answered yet: the session stops once it starts (Ctrl-C again to quit at once)");
    }

    fn stopping(&mut self) {
        if self.tty {
            note!("");
        }
        note!("dsipc: stopping the session, draining the rest of the stream (Ctrl-C again to quit at once)");
    }

    fn progress(&mut self, tick: Tick, live: &Live) {
        if self.tty && tick.elapsed >= self.last_print + Duration::from_millis(250) {
            self.last_print = tick.elapsed;
            let (counts, parsing) = live.progress();
            note_inline!(
                "\r{}",
                progress_line(tick.elapsed.as_secs_f64(), tick.bytes, counts, parsing)
            );
        }
    }
}

/// The progress line, to be written after `\r` (it ends by clearing the rest of the line).
fn progress_line(secs: f64, bytes: u64, counts: LiveCounts, parsing: bool) -> String {
    let mut line = format!(
        "  {:>7.1} s  {:>9.2} MiB received",
        secs,
        bytes as f64 / 1048576.0
    );
    if parsing {
        line.push_str(&format!(
            "  {} events  {} samples  {} lost",
            counts.events, counts.samples, counts.lost
        ));
    } else {
        line.push_str("  (parsing stopped)");
    }
    line.push_str("\x1b[K");
    line
}

pub(crate) fn cmd_trace(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(
        rest,
        &["PID"],
        &[
            "-o",
            "--output",
            "--providers",
            "--profile",
            "--clrevents",
            "--clreventlevel",
            "--duration",
            "--buffer-mb",
            "--buffersize",
            "--format",
        ],
        &["--no-rundown", "--force"],
    )?;
    let force = p.flag("--force");
    // dotnet-trace's default: APP_yyyyMMdd_HHmmss.nettrace in the current directory.
    let output = match p.value_alias("-o", "--output")? {
        Some(o) => args::path("-o FILE", o)?,
        None => {
            let app = crate::counters::process_name(pid);
            let app = if app.is_empty() {
                "trace".to_string()
            } else {
                app
            };
            crate::output::timestamped(&app, ".nettrace", std::time::SystemTime::now())
        }
    };
    // dotnet-trace's --providers, --profile and --clrevents, combined as it combines them.
    let (specs, notes) = CollectArgs {
        providers: p.value_text("--providers")?,
        profile: p.value_text("--profile")?,
        clrevents: p.value_text("--clrevents")?,
        clreventlevel: p.value_text("--clreventlevel")?,
    }
    .resolve()
    .map_err(|e| CliError::Usage(e.to_string()))?;
    for n in notes {
        term::note!("dsipc: {}", n);
    }
    let duration = match p.value_os("--duration") {
        Some(d) => Some(args::duration("--duration", d)?),
        None => None,
    };
    // dotnet-trace's --buffersize (MB) is --buffer-mb.
    let buffer_mb = match p.value_alias("--buffer-mb", "--buffersize")? {
        Some(b) => match b.to_str().map(str::parse::<u32>) {
            Some(Ok(n)) if (1..=4096).contains(&n) => n,
            _ => return Err(CliError::Usage("--buffer-mb wants 1 to 4096".into())),
        },
        None => 256,
    };
    let rundown = !p.flag("--no-rundown");
    let format = match p.value_lower("--format")? {
        // dotnet-trace's default format: the trace alone.
        Some(f) if f == "nettrace" => None,
        Some(f) => Some(ProfileFormat::parse(&f).map_err(CliError::Usage)?),
        None => None,
    };
    let profile_dest = format.map(|f| live::destination(f, &output));
    // The process's name titles a flame graph: read now, while the process runs.
    let process = format
        .map(|_| crate::counters::process_name(pid))
        .filter(|n| !n.is_empty());
    if let Some(dest) = &profile_dest {
        if *dest == output {
            return Err(CliError::Usage(format!(
                "the profile would overwrite the trace {}: name the trace .nettrace",
                display(&output)
            )));
        }
        if dest.is_dir() {
            return Err(CliError::Failed(format!(
                "cannot write the profile {}: it is a directory",
                display(dest)
            )));
        }
    }
    let client = common.client(pid, dsipc_std::DEFAULT_TIMEOUT)?;

    term::catch_interrupts();
    let mut out = Output::create(&output, force)?;
    let profile_out = match &profile_dest {
        Some(dest) => match Output::create(dest, force) {
            Ok(o) => Some(o),
            Err(e) => {
                out.abandon();
                return Err(e);
            }
        },
        None => None,
    };
    let request = Request {
        providers: specs,
        buffer_mb,
        rundown,
    };
    let mut watch = Terminal {
        tty: term::stderr_is_terminal(),
        last_print: Duration::ZERO,
    };
    // On a helper thread: a second Ctrl-C while the runtime has not answered ends the
    // command at once.
    let session = match start(&client, &request, &mut watch) {
        Ok(s) => s,
        Err(e) => {
            out.abandon();
            if let Some(o) = profile_out {
                o.abandon();
            }
            return match e {
                Error::Aborted => {
                    note!("dsipc: interrupted before the session started; nothing was written");
                    Err(CliError::Exit(130))
                }
                e => Err(e.into()),
            };
        }
    };
    // Dropping the session on an error below closes its connection: the runtime ends it.
    if let Err(e) = out.place() {
        out.abandon();
        if let Some(o) = profile_out {
            o.abandon();
        }
        return Err(e);
    }

    let tty = watch.tty;
    note!(
        "dsipc: tracing pid {} (session 0x{:x}) into {}",
        pid,
        session.session_id(),
        display(&output)
    );
    for s in &request.providers {
        note!(
            "  {:<40} 0x{:016X}  level {}{}",
            clean(&s.name),
            s.keywords,
            s.level,
            s.args
                .as_deref()
                .map(|a| format!("  {}", clean(a)))
                .unwrap_or_default()
        );
    }
    note!(
        "dsipc: {}",
        match duration {
            Some(d) => format!("stopping after {:.1} s or on Ctrl-C", d.as_secs_f64()),
            None => "stop with Ctrl-C".to_string(),
        }
    );
    let live = if format.is_some() {
        Live::Profile(Box::new(LiveProfile::new()))
    } else {
        match Counting::start() {
            Ok(c) => Live::Counting(c),
            // No second thread: parse here.
            Err(_) => Live::Profile(Box::new(LiveProfile::new())),
        }
    };
    let recipe = ToFile::new(request, &mut out, live, duration, watch);
    let start = Instant::now();
    // The blocking driver: it reads, asks the recipe when to stop, and drains after the stop
    // within the session layer's bounds; the recipe judges how the stream ended.
    let Traced {
        end,
        stop_asked,
        parsed: live,
        ending,
        received,
        write_error,
    } = match dsipc_recipes::run_session(session, recipe, None) {
        Ok(t) => t,
        // The recipe fails on nothing of its own (no bound, no parse error that ends it).
        Err(e) => return Err(CliError::Failed(e.to_string())),
    };
    let result: Result<u64, Error> = match end {
        End::Stream(_) => Ok(received),
        // A second Ctrl-C, or a write that failed (said first, below): Error::Aborted.
        End::Failed(e) => Err(e),
        // No deadline is given to the driver.
        End::TimedOut => Err(Error::Aborted),
    };
    let elapsed = start.elapsed().as_secs_f64();
    let counts = live.counts();
    let parse_problem = live.error().map(|e| e.to_string());
    // The final line: in place of the progress line on a terminal, plain otherwise.
    let last = format!(
        "dsipc: received {:.2} MiB in {:.1} s: {} events, {} samples, {} lost{}",
        received as f64 / 1048576.0,
        elapsed,
        counts.events,
        counts.samples,
        counts.lost,
        if parse_problem.is_some() {
            " (counts cover what parsed)"
        } else {
            ""
        }
    );
    if tty {
        note!("\r{}\x1b[K", last);
    } else {
        note!("{}", last);
    }
    let traced = finish_trace(
        &output,
        out,
        received,
        elapsed,
        result,
        (stop_asked, ending),
        write_error,
    );
    let profiled = match (format, profile_dest, profile_out, live) {
        (Some(format), Some(dest), Some(o), Parsed::Profile(live)) => {
            live::write_profile(*live, format, o, (&dest, &output), process)
        }
        _ => {
            if let Some(problem) = &parse_problem {
                note!(
                    "dsipc: warning: the stream did not parse: {}",
                    clean(problem)
                );
            }
            Ok(())
        }
    };
    traced.and(profiled)
}

/// Flushes the trace and reports how the session ended.
fn finish_trace(
    output: &Path,
    mut out: Output,
    received: u64,
    elapsed: f64,
    result: Result<u64, Error>,
    (stop_asked, ending): (bool, Ending),
    write_error: Option<io::Error>,
) -> CliResult {
    // Whatever happened, keep what was received.
    let flushed = out.writer().flush();
    drop(out);
    let kept = |what: &str| {
        format!(
            "{}; kept the {} bytes received in {}",
            what,
            received,
            display(output)
        )
    };
    if let Err(e) = flushed {
        return Err(CliError::Failed(format!(
            "cannot write {}: {}",
            display(output),
            e
        )));
    }
    if let Some(e) = write_error {
        return Err(CliError::Failed(format!(
            "cannot write {}: {}; the session was abandoned",
            display(output),
            e
        )));
    }
    match result {
        Ok(bytes) => {
            // The parser decides whether the stream is whole (V4, V5 and V6 alike).
            match (stop_asked, ending) {
                (_, Ending::Clean) => {}
                (false, Ending::Truncated) => {
                    note!(
                        "dsipc: {}",
                        kept("the runtime ended the stream before any stop and without its end-of-stream object (did it exit or crash?): the trace is truncated")
                    );
                    return Err(CliError::Exit(1));
                }
                (false, Ending::Unparsed) => {
                    note!(
                        "dsipc: {}",
                        kept("the runtime ended the stream before any stop, and the stream did not parse: the trace cannot be vouched for")
                    );
                    return Err(CliError::Exit(1));
                }
                (true, Ending::Truncated) => {
                    note!("dsipc: warning: the stream ended without its end-of-stream object")
                }
                (true, Ending::Unparsed) => {}
            }
            // A result line, on stderr with every other command's: stdout is for data.
            note!(
                "dsipc: wrote {} bytes ({:.2} MiB) to {} in {:.1} s",
                bytes,
                bytes as f64 / 1048576.0,
                display(output),
                elapsed
            );
            Ok(())
        }
        Err(Error::Aborted) => {
            note!(
                "dsipc: {}",
                kept("interrupted again: stopped reading; the trace is incomplete")
            );
            Err(CliError::Exit(130))
        }
        Err(e) => {
            note!("dsipc: {}", clean(&kept(&e.to_string())));
            Err(CliError::Exit(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_line_counts_and_clears_the_rest_of_the_line() {
        let c = LiveCounts {
            events: 1234,
            samples: 56,
            lost: 7,
        };
        let l = progress_line(2.5, 3 * 1048576, c, true);
        assert_eq!(
            l,
            "      2.5 s       3.00 MiB received  1234 events  56 samples  7 lost\x1b[K"
        );
        assert!(!l.contains('\r') && !l.contains('\n'));
        let l = progress_line(0.0, 0, LiveCounts::default(), false);
        assert!(
            l.contains("0.00 MiB received  (parsing stopped)"),
            "{:?}",
            l
        );
        assert!(!l.contains("events"));
    }
}
