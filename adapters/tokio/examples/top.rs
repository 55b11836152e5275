//! `top`: samples a live .NET runtime for a few seconds and prints its hottest methods.
//!
//! ```text
//! cargo run -p dsipc-tokio --example top -- PID [--seconds N] [--top N] [--tmpdir DIR]
//! ```
//!
//! Starts an EventPipe session with dotnet-trace's `cpu-sampling` providers (the sample
//! profiler and the runtime provider with rundown, as `dsipc trace --format` does), feeds
//! the stream to a dsipc-trace `LiveProfile` as it arrives, stops the session from a second
//! connection after N seconds, and prints the top methods by exclusive samples. Exit codes:
//! 0 success, 1 the session failed, 2 bad arguments.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use dsipc::session::Profile;
use dsipc_tokio::DiagnosticsClient;
use dsipc_trace::format::report::top_methods;
use dsipc_trace::format::Selection;
use dsipc_trace::LiveProfile;

const USAGE: &str = "usage: top PID [--seconds N] [--top N] [--tmpdir DIR]";

struct Args {
    pid: u32,
    seconds: f64,
    top: usize,
    tmpdir: Option<PathBuf>,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut pid = None;
    let mut seconds = 5.0;
    let mut top = 10;
    let mut tmpdir = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{} needs a value", name))
        };
        match a.as_str() {
            "--seconds" => {
                let v = value("--seconds")?;
                seconds = match v.parse::<f64>() {
                    Ok(s) if s.is_finite() && s > 0.0 && s <= 86_400.0 => s,
                    _ => {
                        return Err(format!(
                            "--seconds {:?} is not a number of seconds in (0, 86400]",
                            v
                        ))
                    }
                };
            }
            "--top" => {
                let v = value("--top")?;
                top = match v.parse::<usize>() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--top {:?} is not a positive integer", v)),
                };
            }
            "--tmpdir" => tmpdir = Some(PathBuf::from(value("--tmpdir")?)),
            "-h" | "--help" => return Err(String::new()),
            s if s.starts_with('-') => return Err(format!("unknown option {}", s)),
            s => {
                if pid.is_some() {
                    return Err(format!("unexpected argument {:?}", s));
                }
                pid = match s.parse::<u32>() {
                    Ok(p) if p > 0 => Some(p),
                    _ => return Err(format!("PID {:?} is not a process id", s)),
                };
            }
        }
    }
    Ok(Args {
        pid: pid.ok_or_else(|| "missing PID".to_string())?,
        seconds,
        top,
        tmpdir,
    })
}

async fn run(args: Args) -> Result<(), String> {
    let client = DiagnosticsClient::for_pid_in(args.pid, args.tmpdir.as_deref())
        .map_err(|e| e.to_string())?;
    // dotnet-trace's `cpu-sampling` profile (the session layer's presets).
    let specs = Profile::CpuSampling.providers();
    let providers: Vec<_> = specs.iter().map(|p| p.as_provider()).collect();
    let mut session = client
        .collect_tracing(&providers, 256, true)
        .await
        .map_err(|e| format!("cannot start the session: {}", e))?;
    let stop = session.stop_handle();
    let seconds = args.seconds;
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        stop.stop().await
    });
    let mut live = LiveProfile::new();
    while let Some(chunk) = session.next_chunk().await {
        let chunk = chunk.map_err(|e| format!("the session failed: {}", e))?;
        // A parse error is kept by the profile; the session is read to its end anyway.
        let _ = live.feed(&chunk);
    }
    match stopper.await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(format!("stopping the session failed: {}", e)),
        Err(e) => return Err(format!("the stop task failed: {}", e)),
    }
    if let Err(e) = live.finish() {
        return Err(format!("the trace does not parse: {}", e));
    }
    let live_counts = live.counts();
    let (profile, _) = live.into_profile("top");
    let (methods, total) = top_methods(&profile, Selection::default(), args.top);
    println!(
        "pid {}: {} samples in {:.1} s ({} events, {} lost, {} bytes)",
        args.pid,
        total,
        seconds,
        live_counts.events,
        live_counts.lost,
        session.bytes_received()
    );
    println!("{:>4}  {:>9} {:>7}  method", "#", "exclusive", "%");
    for (i, m) in methods.iter().take(args.top).enumerate() {
        let pct = if total == 0 {
            0.0
        } else {
            m.exclusive as f64 * 100.0 / total as f64
        };
        println!("{:>4}  {:>9} {:>6.2}%  {}", i + 1, m.exclusive, pct, m.name);
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&args) {
        Ok(a) => a,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("top: {}", msg);
            }
            eprintln!("{}", USAGE);
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("top: cannot start the tokio runtime: {}", e);
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("top: {}", msg);
            ExitCode::from(1)
        }
    }
}
