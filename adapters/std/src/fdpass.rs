//! user_events sessions: CollectTracing5/6 with `session_type = 1` make the runtime write
//! events to user_events tracepoints through a `user_events_data` descriptor the client
//! passes with `SCM_RIGHTS` right after the request (one data byte; the runtime reads it
//! before it replies). Unix only: on Windows such a request is
//! [`Error::FdPassingUnsupported`].
//!
//! [`DiagnosticsClient::start_user_events_tracing`](crate::DiagnosticsClient::start_user_events_tracing) sends the request, passes the
//! descriptor (dsipc-platform's [`send_fd`](dsipc_platform::fdpass::send_fd)), then waits
//! for the session id like [`DiagnosticsClient::start_tracing`](crate::DiagnosticsClient::start_tracing).

use crate::Error;

/// The error for a user_events request given to [`DiagnosticsClient::start_tracing`],
/// which passes no descriptor.
///
/// [`DiagnosticsClient::start_tracing`]: crate::DiagnosticsClient::start_tracing
pub(crate) fn needs_descriptor() -> Error {
    #[cfg(unix)]
    {
        Error::InvalidArgument(
            "user_events sessions pass the user_events_data descriptor: use start_user_events_tracing",
        )
    }
    #[cfg(not(unix))]
    {
        Error::FdPassingUnsupported
    }
}

#[cfg(unix)]
pub use self::unix::PassFd;

#[cfg(unix)]
mod unix {
    use dsipc::payload::Request;
    use dsipc::AnyRequest;
    use std::io;
    use std::os::unix::io::{AsFd, BorrowedFd};
    use std::os::unix::net::UnixStream;

    use dsipc::session::Tracing;

    use crate::drive::{is_timeout, millis_ceil};
    use crate::{Connection, DiagnosticsClient, Error, TraceSession, Transport};

    /// A connection that can pass a file descriptor with `SCM_RIGHTS` (Unix sockets).
    pub trait PassFd: Connection {
        /// Sends `fd` attached to one data byte, within the connection's write timeout.
        fn pass_fd(&self, fd: BorrowedFd<'_>) -> io::Result<()>;
    }

    impl PassFd for UnixStream {
        fn pass_fd(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
            dsipc_platform::fdpass::send_fd(self.as_fd(), fd)
        }
    }

    impl<T: Transport> DiagnosticsClient<T>
    where
        T::Conn: PassFd,
    {
        /// Starts a user_events session (CollectTracing5 or 6 with `UserEvents`): sends the
        /// request, passes `user_events_data` (normally `/sys/kernel/tracing/user_events_data`,
        /// opened read-write; the caller keeps its descriptor, the runtime gets a copy)
        /// with `SCM_RIGHTS`, and returns once the runtime has accepted the session.
        ///
        /// The runtime registers the session's tracepoints and writes its events through
        /// that descriptor, not on the connection: on a real runtime the returned session's
        /// stream stays empty, and (in the runtime's source as of .NET 10) the connection is
        /// not closed when the session stops, nor is the session stopped when the connection
        /// closes. So stop it with [`StopHandle::stop`](crate::StopHandle::stop) (from
        /// [`TraceSession::stop_handle`]) and then drop it, rather than draining it. (The
        /// testkit's fake runtime streams on it like any session.)
        ///
        /// Errors: [`Error::InvalidArgument`] for any other request (nothing is sent and
        /// no descriptor passed); [`Error::FdNotPassed`] when the descriptor could not be
        /// sent (typically: the peer closed the connection first) and the peer said nothing
        /// else; the runtime's own answer when it sent one (an older runtime answers
        /// CollectTracing5 with `UNKNOWN_COMMAND`: [`Error::NotSupported`]); the usual
        /// connect, timeout and protocol errors.
        pub fn start_user_events_tracing<'a, R, F>(
            &self,
            request: R,
            user_events_data: &F,
        ) -> Result<TraceSession<T>, Error>
        where
            R: Into<AnyRequest<'a>>,
            F: AsFd + ?Sized,
        {
            let request: AnyRequest<'a> = request.into();
            let command = request.command();
            if !request.requires_fd_passing() {
                return Err(Error::InvalidArgument(
                    "not a user_events session request (CollectTracing5/6 with UserEvents): use start_tracing",
                ));
            }
            let timeout = self.timeout();
            let tracing = Tracing::with_request(request, 0, millis_ceil(timeout))
                .map_err(|e| Error::from_session(e, timeout))?;
            let mut failed: Option<io::Error> = None;
            let started = crate::session::start(self, tracing, |conn, tracing, _| {
                if let Err(source) = conn.pass_fd(user_events_data.as_fd()) {
                    if is_timeout(&source) {
                        return Err(Error::Timeout {
                            command: tracing.command(),
                            timeout,
                        });
                    }
                    // The peer closed first. A runtime that did not know the command (or
                    // refused it) has answered before closing: that answer says more than
                    // the failed send, so look for it; without one, the send's failure is
                    // the error.
                    failed = Some(source);
                }
                Ok(())
            });
            match (started, failed) {
                (Ok(s), None) => Ok(s),
                (Err(e @ (Error::ErrorReply { .. } | Error::NotSupported { .. })), _) => Err(e),
                (Err(e), None) => Err(e),
                (_, Some(source)) => Err(Error::FdNotPassed { command, source }),
            }
        }
    }
}

#[cfg(all(test, windows))]
mod windows_tests {
    use std::time::Duration;

    use dsipc::payload::{
        CollectTracing5, EventFilter, Provider, TracepointConfig, UserEventsProvider,
        UserEventsSession,
    };
    use dsipc::wire::{Seq, Text};

    use crate::{DiagnosticsClient, Endpoint, Error};

    #[test]
    fn user_events_sessions_are_unsupported_on_windows() {
        let providers = [UserEventsProvider {
            provider: Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4),
            filter: EventFilter::default(),
            tracepoint_config: TracepointConfig {
                default_tracepoint_name: Text::Str("dotnet_runtime"),
                tracepoints: Seq::EMPTY,
            },
        }];
        let request = CollectTracing5::UserEvents(UserEventsSession {
            rundown_keyword: 0,
            providers: Seq::Slice(&providers),
        });
        // Refused before connecting: this pipe does not exist.
        let client = DiagnosticsClient::new(Endpoint::new(r"\\.\pipe\dsipc-no-such-pipe"))
            .with_timeout(Duration::from_secs(1));
        match client.start_tracing(request) {
            Err(Error::FdPassingUnsupported) => {}
            other => panic!("{:?}", other.map(|s| s.session_id())),
        }
    }
}
