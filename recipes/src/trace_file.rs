//! `dsipc trace`'s session as a recipe: [`ToFile`] writes every chunk of the stream to a
//! [`Write`] the caller owns (the `.nettrace` file) and feeds the live parse ([`Live`]),
//! stopped at a duration or when its [`Watch`] says so (Ctrl-C), abandoned when the
//! watch says to quit or the file cannot be written. [`Traced`] says how it went, with
//! the stream's [`Ending`] judged from the session layer's outcome and the parse.
//!
//! Beside serve's `ToBody` (a session into a response body, on the async driver), which
//! shares the shape (a consumer of the chunks, stopped from outside) but not the code: a
//! body pushes back and is abandoned when its reader goes away, a file neither.

use std::io::{self, Write};
use std::sync::mpsc;
use std::time::Duration;

use dsipc::nettrace::NettraceError;
use dsipc::session::Outcome;
use dsipc_std::{DiagnosticsClient, Endpoint, Error, TraceSession};
use dsipc_trace::StreamError;

use super::{Live, Parsed};
use crate::{Collect, End, RecipeError, Request, Tick};

/// What a [`ToFile`] asks of whoever runs it (the CLI: Ctrl-C, its progress line).
pub trait Watch {
    /// Whether a stop came from outside (a Ctrl-C); asked after every read until the
    /// session is asked to stop.
    fn stop_requested(&mut self) -> bool;
    /// Whether to stop reading at once (a second Ctrl-C): the session then ends as
    /// [`Error::Aborted`] (in [`start`], the wait for the runtime's answer).
    fn quit(&self) -> bool;
    /// A stop came while the runtime has not answered the start yet ([`start`]): the
    /// session stops once it starts. Nothing by default.
    fn stop_before_start(&mut self) {}
    /// The session is being stopped (its duration is over, or a stop was requested):
    /// nothing by default.
    fn stopping(&mut self) {}
    /// After every read: where the session stands and the live parse
    /// ([`Live::progress`]). Nothing by default.
    fn progress(&mut self, tick: Tick, live: &Live) {
        let _ = (tick, live);
    }
}

/// How often [`start`] looks at its [`Watch`] while the runtime has not answered.
const START_POLL: Duration = Duration::from_millis(50);

/// Starts the session `request` describes on a helper thread, so that a [`Watch`] that
/// says [`quit`](Watch::quit) before the runtime answers ends the wait at once
/// ([`Error::Aborted`]; a session that starts later is closed, which ends it in the
/// runtime). The start itself is bounded by the client's timeout. Then
/// [`run_session`](crate::run_session) with a [`ToFile`].
pub fn start(
    client: &DiagnosticsClient,
    request: &Request,
    watch: &mut impl Watch,
) -> Result<TraceSession<Endpoint>, Error> {
    let (tx, rx) = mpsc::channel();
    let client = client.clone();
    let req = request.clone();
    std::thread::Builder::new()
        .name("dsipc-start".into())
        .spawn(move || {
            let _ = tx.send(client.collect_tracing(&req.providers(), req.buffer_mb, req.rundown));
        })?;
    let mut told = false;
    loop {
        match rx.recv_timeout(START_POLL) {
            Ok(result) => return result,
            Err(mpsc::RecvTimeoutError::Timeout) if watch.quit() => return Err(Error::Aborted),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if !told && watch.stop_requested() {
                    told = true;
                    watch.stop_before_start();
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(Error::Io(io::Error::new(
                    io::ErrorKind::Other,
                    "the thread starting the session ended without an answer",
                )))
            }
        }
    }
}

/// How the stream ended, as its parse and the session layer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// With its end-of-stream object (V4/V5 end tag, V6 EndOfStream block).
    Clean,
    /// Cut short: the parser wanted more.
    Truncated,
    /// The stream did not parse: its end cannot be judged.
    Unparsed,
}

impl Ending {
    /// Whole or cut is the session layer's outcome (the stream's framing, in `end`); the
    /// parse (`parsed`, from [`Parsed::finish`]) says whether its content holds.
    pub fn judge(end: &End, parsed: &Result<(), StreamError>) -> Ending {
        match (end, parsed) {
            (
                End::Stream(Outcome::Cut {
                    reason: NettraceError::Truncated { .. },
                    ..
                }),
                _,
            ) => Ending::Truncated,
            (End::Stream(Outcome::Cut { .. }), _) => Ending::Unparsed,
            (_, Err(e)) if e.is_truncation() => Ending::Truncated,
            (_, Err(_)) => Ending::Unparsed,
            (_, Ok(())) => Ending::Clean,
        }
    }
}

/// A session into a file, as a recipe (see the module docs). Driven with
/// [`run_session`](crate::run_session) on a session the caller started (as
/// [`request`](Collect::request) says), as long as it runs: no byte bound.
pub struct ToFile<W, H> {
    request: Request,
    out: W,
    live: Live,
    duration: Option<Duration>,
    watch: H,
    bytes: u64,
    write_error: Option<io::Error>,
}

impl<W: Write, H: Watch> ToFile<W, H> {
    /// The session `request` describes into `out` and `live`, stopped after `duration`
    /// (if given) or when `watch` says so.
    pub fn new(
        request: Request,
        out: W,
        live: Live,
        duration: Option<Duration>,
        watch: H,
    ) -> ToFile<W, H> {
        ToFile {
            request,
            out,
            live,
            duration,
            watch,
            bytes: 0,
            write_error: None,
        }
    }
}

/// What [`ToFile`] leaves once its session is over.
pub struct Traced {
    /// How the session ended.
    pub end: End,
    /// Whether the session was asked to stop (StopTracing sent).
    pub stop_asked: bool,
    /// The live parse, fed every byte and finished.
    pub parsed: Parsed,
    /// How the stream ended ([`Ending::judge`]).
    pub ending: Ending,
    /// Stream bytes received (all of them were offered to the file).
    pub received: u64,
    /// The write that failed, if one did (the session was then abandoned).
    pub write_error: Option<io::Error>,
}

impl<W: Write, H: Watch> Collect for ToFile<W, H> {
    type Output = Traced;

    fn request(&self) -> Request {
        self.request.clone()
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        self.bytes += data.len() as u64;
        self.live.feed(data);
        if self.write_error.is_none() {
            if let Err(e) = self.out.write_all(data) {
                // Ends the session at once (abandon): nothing more can be kept.
                self.write_error = Some(e);
            }
        }
        Ok(())
    }

    fn tick(&mut self, tick: Tick) {
        self.live.tick();
        self.watch.progress(tick, &self.live);
    }

    fn enough(&mut self, elapsed: Duration) -> bool {
        let stop = self.watch.stop_requested() || self.duration.map_or(false, |d| elapsed >= d);
        if stop {
            self.watch.stopping();
        }
        stop
    }

    fn abandon(&self) -> bool {
        self.watch.quit() || self.write_error.is_some()
    }

    fn max_bytes(&self) -> u64 {
        // As long as the user wants: the file takes it, the parse holds no more than its
        // metadata, methods and stacks.
        u64::MAX
    }

    fn finish(self, end: End, stop_asked: bool) -> Result<Traced, RecipeError> {
        let mut parsed = self.live.into_parsed();
        let ending = Ending::judge(&end, &parsed.finish());
        Ok(Traced {
            end,
            stop_asked,
            parsed,
            ending,
            received: self.bytes,
            write_error: self.write_error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsipc_trace::LiveProfile;

    struct Quiet {
        stop: bool,
        quit: bool,
        stopping: usize,
    }

    impl Watch for Quiet {
        fn stop_requested(&mut self) -> bool {
            self.stop
        }
        fn quit(&self) -> bool {
            self.quit
        }
        fn stopping(&mut self) {
            self.stopping += 1;
        }
    }

    fn quiet() -> Quiet {
        Quiet {
            stop: false,
            quit: false,
            stopping: 0,
        }
    }

    fn request() -> Request {
        Request {
            providers: Vec::new(),
            buffer_mb: 64,
            rundown: true,
        }
    }

    fn profile() -> Live {
        Live::Profile(Box::new(LiveProfile::new()))
    }

    fn busy_capture() -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/data/nettrace/net8.0.4-busy.nettrace");
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
    }

    #[test]
    fn a_trace_into_a_file_keeps_every_byte_and_ends_clean() {
        let bytes = busy_capture();
        let mut file = Vec::new();
        let mut r = ToFile::new(request(), &mut file, profile(), None, quiet());
        for chunk in bytes.chunks(4096) {
            r.feed(chunk).unwrap();
        }
        assert!(!r.abandon());
        let end = End::Stream(Outcome::Stopped {
            bytes: bytes.len() as u64,
        });
        let t = r.finish(end, true).unwrap();
        assert_eq!(t.ending, Ending::Clean);
        assert_eq!(t.received, bytes.len() as u64);
        assert!(t.stop_asked && t.write_error.is_none());
        assert!(t.parsed.counts().samples > 0);
        assert_eq!(file, bytes);
    }

    #[test]
    fn the_duration_or_the_watch_stops_it_and_quit_abandons_it() {
        let mut file = Vec::new();
        let mut r = ToFile::new(
            request(),
            &mut file,
            profile(),
            Some(Duration::from_secs(2)),
            quiet(),
        );
        assert!(!r.enough(Duration::from_secs(1)));
        assert!(r.enough(Duration::from_secs(2)));
        assert_eq!(r.watch.stopping, 1);
        let mut r = ToFile::new(request(), &mut file, profile(), None, quiet());
        assert!(!r.enough(Duration::from_secs(3600)));
        r.watch.stop = true;
        assert!(r.enough(Duration::ZERO) && !r.abandon());
        r.watch.quit = true;
        assert!(r.abandon());
    }

    #[test]
    fn a_file_that_cannot_be_written_abandons_the_session_keeping_the_error() {
        // Room for 4 bytes only: the first write fails.
        let mut room = [0u8; 4];
        let mut r = ToFile::new(request(), &mut room[..], profile(), None, quiet());
        r.feed(b"not a trace").unwrap();
        assert!(r.abandon());
        r.feed(b"more").unwrap();
        let t = r
            .finish(End::Failed(dsipc_std::Error::Aborted), false)
            .unwrap();
        assert_eq!(t.received, 15);
        assert_eq!(t.write_error.unwrap().kind(), io::ErrorKind::WriteZero);
        // Bytes that are no nettrace header do not parse.
        assert_eq!(t.ending, Ending::Unparsed);
    }

    #[test]
    fn the_ending_is_the_framings_then_the_parses() {
        let cut = |reason| {
            End::Stream(Outcome::Cut {
                bytes: 10,
                offset: 10,
                stop_requested: false,
                reason,
            })
        };
        let truncated = NettraceError::Truncated {
            offset: 10,
            needed: 4,
            available: 0,
        };
        let bad = NettraceError::BadVarint { offset: 3 };
        let whole = End::Stream(Outcome::Ended { bytes: 10 });
        let short = StreamError::Truncated {
            offset: 10,
            unparsed: 2,
        };
        // The framing's cut wins over a parse that went through.
        assert_eq!(Ending::judge(&cut(truncated), &Ok(())), Ending::Truncated);
        assert_eq!(Ending::judge(&cut(bad), &Ok(())), Ending::Unparsed);
        assert_eq!(Ending::judge(&whole, &Ok(())), Ending::Clean);
        assert_eq!(Ending::judge(&whole, &Err(short)), Ending::Truncated);
        let malformed = StreamError::Malformed(bad);
        assert_eq!(Ending::judge(&whole, &Err(malformed)), Ending::Unparsed);
        // A session that failed: the parse alone.
        let failed = End::Failed(dsipc_std::Error::Aborted);
        assert_eq!(Ending::judge(&failed, &Err(short)), Ending::Truncated);
        assert_eq!(Ending::judge(&End::TimedOut, &Ok(())), Ending::Clean);
    }
}
