//! The session layer in the reactor: [`Control::call`], [`Control::trace`] and
//! [`Control::stop_trace`], and the state the reactor keeps for them. Every protocol
//! decision (which command version, what to fall back to, what a reply must be, when time
//! is up, how a session ended) is [`dsipc::session`]'s; `drive.rs` moves their bytes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsipc::session::{Ask, Call, Millis, Outcome, TraceConfig, Tracing};

use crate::timers::{Owner, Timers};
use crate::{CallId, ConnId, Control, Error, TraceId};
#[cfg(doc)]
use crate::{Event, Reactor};

/// A call in flight: the layer's [`Call`] and the connection it runs on.
#[derive(Debug)]
pub(crate) struct CallSlot {
    pub(crate) call: Call,
    pub(crate) path: PathBuf,
    pub(crate) conn: Option<ConnId>,
    /// Its entry in the timers.
    pub(crate) armed: Option<Millis>,
}

impl CallSlot {
    pub(crate) fn new(call: Call, path: PathBuf) -> CallSlot {
        CallSlot {
            call,
            path,
            conn: None,
            armed: None,
        }
    }
}

/// A session in flight: the layer's [`Tracing`], its connection, and its stop.
#[derive(Debug)]
pub(crate) struct TraceSlot {
    pub(crate) tracing: Tracing,
    pub(crate) path: PathBuf,
    pub(crate) conn: Option<ConnId>,
    pub(crate) armed: Option<Millis>,
    /// The user asked for a stop (requested as soon as the session started).
    pub(crate) stop_wanted: bool,
    /// The stop's StopTracing call, on a second connection, while it runs.
    pub(crate) stop: Option<CallSlot>,
    /// The error that failed the stop's connection (the layer is only told that it failed).
    pub(crate) stop_error: Option<Error>,
    /// How the stream ended, held until the stop in flight is over.
    pub(crate) ended: Option<Result<Outcome, Error>>,
}

/// Every call and session of a reactor, their deadlines, and who is to be driven next.
#[derive(Debug)]
pub(crate) struct Sessions {
    /// The origin of the layer's [`Millis`].
    epoch: Instant,
    next_id: u64,
    pub(crate) calls: HashMap<u64, CallSlot>,
    pub(crate) traces: HashMap<u64, TraceSlot>,
    /// Owners to drive at the next poll (new, yielded after their read budget, or told
    /// something by another owner).
    pub(crate) pending: Vec<Owner>,
    pub(crate) timers: Timers,
    /// The session being driven (out of `traces` meanwhile), and whether a handler asked
    /// to stop it then.
    pub(crate) busy: Option<u64>,
    pub(crate) busy_stop: bool,
    /// Calls and sessions whose end was not reported yet.
    pub(crate) in_flight: usize,
}

impl Sessions {
    pub(crate) fn new() -> Sessions {
        Sessions {
            epoch: Instant::now(),
            next_id: 0,
            calls: HashMap::new(),
            traces: HashMap::new(),
            pending: Vec::new(),
            timers: Timers::default(),
            busy: None,
            busy_stop: false,
            in_flight: 0,
        }
    }

    /// Now on the layer's clock: whole milliseconds since the epoch, rounded down (so the
    /// reactor, woken at [`instant`](Self::instant)`(t)` or later, sees `t` due).
    pub(crate) fn now(&self) -> Millis {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The instant of `at` on the layer's clock.
    pub(crate) fn instant(&self, at: Millis) -> Instant {
        self.epoch
            .checked_add(Duration::from_millis(at))
            // Beyond what an `Instant` holds: far enough to never come.
            .unwrap_or_else(|| self.epoch + Duration::from_secs(u32::MAX as u64))
    }

    /// When the earliest deadline of a call or session falls.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.timers.next().map(|t| self.instant(t))
    }

    /// A new id, counted in flight until its end is reported.
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.in_flight += 1;
        self.next_id
    }

    /// The timer record of `owner`, while it is parked here.
    fn armed(&mut self, owner: Owner) -> Option<&mut Option<Millis>> {
        match owner {
            Owner::Call(id) => self.calls.get_mut(&id).map(|s| &mut s.armed),
            Owner::Trace(id) => self.traces.get_mut(&id).map(|s| &mut s.armed),
            Owner::Stop(id) => self
                .traces
                .get_mut(&id)
                .and_then(|s| s.stop.as_mut())
                .map(|s| &mut s.armed),
        }
    }

    /// True (and the owner disarmed) when the timer entry `(at, owner)` that came up is
    /// the one the owner armed.
    pub(crate) fn disarm(&mut self, owner: Owner, at: Millis) -> bool {
        match self.armed(owner) {
            Some(a) if *a == Some(at) => {
                *a = None;
                true
            }
            _ => false,
        }
    }

    /// Drops stale timer entries once they may outnumber the live ones.
    pub(crate) fn compact_timers(&mut self) {
        let Sessions {
            calls,
            traces,
            timers,
            ..
        } = self;
        let live = calls.len() + 2 * traces.len();
        timers.compact(live, |owner| match owner {
            Owner::Call(id) => calls.get(&id).and_then(|s| s.armed),
            Owner::Trace(id) => traces.get(&id).and_then(|s| s.armed),
            Owner::Stop(id) => traces
                .get(&id)
                .and_then(|s| s.stop.as_ref())
                .and_then(|s| s.armed),
        });
    }
}

/// Milliseconds of `d`, rounded up (a 1.5 ms budget is 2 ms on the layer's clock).
fn millis_ceil(d: Duration) -> u64 {
    let ms = d.as_nanos().saturating_add(999_999) / 1_000_000;
    u64::try_from(ms).unwrap_or(u64::MAX)
}

impl Control {
    // ---- the session layer -------------------------------------------------------------

    /// Runs one command to its end with the session layer's policy ([`dsipc::session`]):
    /// the version to send and the fallbacks after UNKNOWN_COMMAND (ProcessInfo tries
    /// three versions, each on a new connection), the bound on an environment, the
    /// judging of every reply into a typed error, and one deadline, `timeout`, for all of
    /// it (connecting, every fallback, every reply). What the runtime says comes as
    /// [`Event::Call`], the end as [`Event::CallDone`] (exactly once). The reactor wakes
    /// by itself at the deadline.
    ///
    /// Nothing is sent before the next [`Reactor::poll`]; a connection that cannot be
    /// opened ends the call with [`Error::Io`] in its [`Event::CallDone`] (`WouldBlock`
    /// when the runtime's listen backlog is full, as for [`connect`](Self::connect)).
    /// Errors here:
    /// [`Error::Session`] for a request the layer refuses before sending anything,
    /// [`Error::FdPassingUnsupported`] for user_events sessions.
    pub fn call(
        &mut self,
        path: impl AsRef<Path>,
        ask: Ask<'_>,
        timeout: Duration,
    ) -> Result<CallId, Error> {
        let now = self.sessions.now();
        let call = Call::new(ask, now, millis_ceil(timeout))?;
        if call.requires_fd_passing() {
            return Err(Error::FdPassingUnsupported);
        }
        let id = self.sessions.id();
        let slot = CallSlot::new(call, path.as_ref().to_path_buf());
        self.sessions.calls.insert(id, slot);
        self.sessions.pending.push(Owner::Call(id));
        Ok(CallId(id))
    }

    /// Starts an EventPipe session with the session layer's policy: the CollectTracing
    /// version `config` needs (and the older ones after UNKNOWN_COMMAND), within
    /// `timeout`. [`Event::TraceStarted`] follows, then the stream as
    /// [`Event::TraceData`], then [`Event::TraceDone`] (exactly once) with the
    /// [`Outcome`]. Before a stop the stream may stay quiet for any time; stop it with
    /// [`stop_trace`](Self::stop_trace), after which every wait is bounded by `timeout`.
    ///
    /// Errors: [`Error::Session`] for a configuration the layer refuses before sending
    /// anything, [`Error::FdPassingUnsupported`] for user_events sessions.
    pub fn trace(
        &mut self,
        path: impl AsRef<Path>,
        config: TraceConfig<'_>,
        timeout: Duration,
    ) -> Result<TraceId, Error> {
        let now = self.sessions.now();
        let tracing = Tracing::new(config, now, millis_ceil(timeout))?;
        if tracing.requires_fd_passing() {
            return Err(Error::FdPassingUnsupported);
        }
        let id = self.sessions.id();
        let slot = TraceSlot {
            tracing,
            path: path.as_ref().to_path_buf(),
            conn: None,
            armed: None,
            stop_wanted: false,
            stop: None,
            stop_error: None,
            ended: None,
        };
        self.sessions.traces.insert(id, slot);
        self.sessions.pending.push(Owner::Trace(id));
        Ok(TraceId(id))
    }

    /// Stops a [`trace`](Self::trace) session: StopTracing goes on a second connection (as
    /// soon as the session started, if it has not yet), while the session's own connection
    /// is read to its end (the runtime answers the stop only after it flushed the session,
    /// rundown included, into it). The session then ends with [`Outcome::Stopped`] in its
    /// [`Event::TraceDone`]; a stop refused or not answered within the session's timeout
    /// ends it with that error. Asking again does nothing.
    ///
    /// Errors: [`Error::UnknownTrace`] once the session is over.
    pub fn stop_trace(&mut self, id: TraceId) -> Result<(), Error> {
        let s = &mut self.sessions;
        if let Some(slot) = s.traces.get_mut(&id.0) {
            if !slot.stop_wanted {
                slot.stop_wanted = true;
                s.pending.push(Owner::Trace(id.0));
            }
            Ok(())
        } else if s.busy == Some(id.0) {
            // Its own handler call: taken when the handler returns.
            s.busy_stop = true;
            Ok(())
        } else {
            Err(Error::UnknownTrace(id))
        }
    }

    /// Calls and sessions whose [`Event::CallDone`] or [`Event::TraceDone`] is still to
    /// come.
    pub fn session_count(&self) -> usize {
        self.sessions.in_flight
    }
}
