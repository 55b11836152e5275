//! `dsipc counters collect`: samples written to a csv or json file, as dotnet-counters
//! collect writes them.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use dsipc_trace::counters::{files, CounterEvent};

use dsipc_recipes::counters::{CollectPolicy, Collecting};

use super::{options, process_name, report_end, start, Result, VALUES};
use crate::args::parse;
use crate::error::CliError;
use crate::output::Output;
use crate::term;
use crate::term::clean;

pub(super) fn collect(args: &[String]) -> Result<()> {
    let p = parse(args, VALUES, &["--force"])?;
    let o = options(&p, false)?;
    let pid = o.pids[0];
    let json = match p.value_lower("--format")?.as_deref().unwrap_or("csv") {
        "csv" => false,
        "json" => true,
        other => {
            return Err(CliError::Usage(format!(
                "--format is csv or json, not {:?}",
                other
            )))
        }
    };
    let duration = match p.value("--duration") {
        Some(s) => Some(crate::args::duration(
            "--duration",
            std::ffi::OsStr::new(s),
        )?),
        None => None,
    };
    let ext = if json { ".json" } else { ".csv" };
    // dotnet-counters' counter.csv, timestamped so that a second run never meets the first's.
    let target = match p.value("-o").or_else(|| p.value("--output")) {
        Some(t) => t.to_string(),
        None => crate::output::timestamped("counter", ext, SystemTime::now())
            .to_string_lossy()
            .into_owned(),
    };
    let path = if target == "-" {
        None
    } else if target.ends_with(ext) {
        Some(PathBuf::from(target))
    } else {
        Some(PathBuf::from(format!("{}{}", target, ext)))
    };
    // The CLI's one output policy: prepared now, in place once the session runs.
    let mut out = match &path {
        Some(path) => Output::create(path, p.flag("--force"))?,
        None => Output::stdout(),
    };
    term::catch_interrupts();
    let session = match start(&o, pid) {
        Ok(s) => s,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    };
    if let Err(e) = out.place() {
        out.abandon();
        return Err(e);
    }
    let mut writer = files::FileWriter::new(out, json, &process_name(pid), SystemTime::now())?;
    eprintln!(
        "dsipc: collecting counters of pid {} every {} s{}",
        pid,
        o.interval,
        match duration {
            Some(d) => format!(" for {:.1} s", d.as_secs_f64()),
            None => String::new(),
        }
    );
    let started = Instant::now();
    let policy = CollectPolicy::new(o.interval, duration);
    let mut exited = false;
    let mut failure = None;
    loop {
        if term::interrupted() {
            break;
        }
        // As dotnet-counters: collect for the duration and write what came; a duration
        // shorter than the runtime's first publication still waits for that first batch
        // (up to the first-sample limit).
        match policy.check(started.elapsed(), writer.events()) {
            Collecting::Go => {}
            Collecting::Done => break,
            Collecting::NoSamples => {
                // The limit waited for (a loaded machine may notice it a little later).
                failure = Some(format!(
                    "no counters received in {:.1} s",
                    policy.first_sample_limit.as_secs_f64()
                ));
                break;
            }
        }
        match session.recv_timeout(Duration::from_millis(100)) {
            Ok(CounterEvent::Sample(s)) => {
                writer.sample(&s)?;
                // Flush when the batch of this interval is through.
                while let Ok(ev) = session.try_recv() {
                    match ev {
                        CounterEvent::Sample(s) => writer.sample(&s)?,
                        CounterEvent::Notice(n) => {
                            eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string()))
                        }
                    }
                }
                writer.flush()?;
            }
            Ok(CounterEvent::Notice(n)) => {
                eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string()));
                if n.ends_session() {
                    failure = Some(n.to_string());
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                exited = true;
                break;
            }
        }
    }
    // Every event up to the stream's end is written: the publication under way at the
    // deadline arrives whole (the runtime flushes it for the stop), never cut in two.
    let mut write_error = None;
    let end = session.stop_draining(&mut |ev| match ev {
        CounterEvent::Sample(s) => {
            if write_error.is_none() {
                if let Err(e) = writer.sample(&s) {
                    write_error = Some(e);
                }
            }
        }
        CounterEvent::Notice(n) => eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string())),
    });
    if let Some(e) = write_error {
        return Err(e.into());
    }
    let events = writer.events();
    writer.finish()?.commit()?;
    report_end("dsipc", pid, &end);
    if exited {
        eprintln!(
            "dsipc: pid {}: the runtime ended the session (exited?)",
            pid
        );
    }
    if let Some(path) = &path {
        eprintln!(
            "dsipc: {} counter values saved to {}",
            events,
            path.display()
        );
    }
    if let Some(f) = failure {
        return Err(CliError::Failed(f));
    }
    if events == 0 {
        return Err(CliError::Failed(format!(
            "no counters received in {:.1} s",
            started.elapsed().as_secs_f64()
        )));
    }
    Ok(())
}
