//! `dsipc counters monitor`: live counters on the terminal, as dotnet-counters monitor
//! shows them.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use dsipc_trace::counters::console::Table;
use dsipc_trace::counters::{files, CounterEvent, Heard};

use super::keys::{self, Keys};
use dsipc_recipes::counters::{CollectPolicy, Collecting};

use super::{options, report_end, start, Result, VALUES};
use crate::args::parse;
use crate::error::CliError;
use crate::term;
use crate::term::clean;

#[cfg(unix)]
fn stdout_is_terminal() -> bool {
    // SAFETY: isatty on a descriptor number has no memory effects.
    unsafe { libc::isatty(1) == 1 }
}

#[cfg(not(unix))]
fn stdout_is_terminal() -> bool {
    false
}

pub(super) fn monitor(args: &[String]) -> Result<()> {
    let p = parse(args, VALUES, &["--showDeltas"])?;
    let o = options(&p, false)?;
    let pid = o.pids[0];
    term::catch_interrupts();
    let session = start(&o, pid)?;
    let tty = stdout_is_terminal();
    let out = io::stdout();
    let mut table = Table::default().with_deltas(p.flag("--showDeltas"));
    let mut status = "Running";
    if tty {
        let mut out = out.lock();
        write!(
            out,
            "\x1b[2J\x1b[H{}",
            table.render("Waiting for the first values", keys::size())
        )?;
        out.flush()?;
    } else {
        let mut out = out.lock();
        writeln!(
            out,
            "# dsipc counters monitor: pid {}, every {} s",
            pid, o.interval
        )?;
        out.flush()?;
    }
    let started = Instant::now();
    let policy = CollectPolicy::new(o.interval, None);
    let limit = policy.first_sample_limit;
    let mut samples = 0u64;
    let mut failure = None;
    // What was asked for by name and never published is said once, after the wait for a
    // first value: the runtime says nothing of names it does not know.
    let mut heard = Heard::new(&o.counters);
    let mut silence_told = false;
    // dotnet-counters' keys: p pauses the display, r resumes it, q quits.
    let mut keys = if tty { Keys::open() } else { None };
    let mut paused = false;
    loop {
        if term::interrupted() {
            break;
        }
        let mut quit = false;
        let mut redraw = false;
        while let Some(k) = keys.as_mut().and_then(Keys::poll) {
            match k {
                b'p' | b'P' if !paused => {
                    paused = true;
                    status = "Paused";
                    redraw = true;
                }
                b'r' | b'R' if paused => {
                    paused = false;
                    status = "Running";
                    redraw = true;
                }
                b'q' | b'Q' => quit = true,
                _ => {}
            }
        }
        if quit {
            break;
        }
        if redraw {
            let mut out = out.lock();
            write!(out, "\x1b[H\x1b[J{}", table.render(status, keys::size()))?;
            out.flush()?;
        }
        if !silence_told && samples > 0 && started.elapsed() >= limit {
            silence_told = true;
            let silent = heard.silent();
            if !silent.is_empty() {
                let n = format!(
                    "nothing published in {:.0} s by {}: check the names (providers and counters as the runtime spells them)",
                    limit.as_secs_f64(),
                    silent.join(", ")
                );
                if tty {
                    table.notice(n);
                } else {
                    eprintln!("dsipc: pid {}: {}", pid, clean(&n));
                }
            }
        }
        if policy.check(started.elapsed(), samples) == Collecting::NoSamples {
            failure = Some(format!(
                "no counters received in {:.1} s",
                limit.as_secs_f64()
            ));
            break;
        }
        let first = match session.recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => ev,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                status = "Exited";
                break;
            }
        };
        let mut batch = vec![first];
        while let Ok(ev) = session.try_recv() {
            batch.push(ev);
        }
        let mut out = out.lock();
        for ev in batch {
            match ev {
                CounterEvent::Sample(s) => {
                    samples += 1;
                    heard.sample(&s);
                    if tty {
                        table.sample(&s);
                    } else {
                        let t = files::tags(&s);
                        writeln!(
                            out,
                            "{}\t{}\t{}{}\t{}",
                            files::universal_time(s.timestamp),
                            clean(&s.provider),
                            clean(&files::display(&s)),
                            if t.is_empty() {
                                String::new()
                            } else {
                                format!(" [{}]", clean(&t))
                            },
                            files::number(s.value)
                        )?;
                    }
                }
                CounterEvent::Notice(n) => {
                    if tty {
                        table.notice(n.to_string());
                    } else {
                        eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string()));
                    }
                }
            }
        }
        // Paused: values keep arriving (and are kept), the screen stays as it was.
        if tty && !paused {
            write!(out, "\x1b[H\x1b[J{}", table.render(status, keys::size()))?;
        }
        out.flush()?;
    }
    drop(keys);
    if tty {
        let mut out = out.lock();
        write!(out, "\x1b[H\x1b[J{}", table.render(status, keys::size()))?;
        out.flush()?;
    }
    let end = session.stop();
    report_end("dsipc", pid, &end);
    if status == "Exited" {
        eprintln!(
            "dsipc: pid {}: the runtime ended the session (exited?)",
            pid
        );
    }
    match failure {
        Some(f) => Err(CliError::Failed(f)),
        None => Ok(()),
    }
}
