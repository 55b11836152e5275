//! Binding a private Unix listener safely: dsipc-platform's
//! [`bind_private`](dsipc_platform::bind_private) (the one dsipc-std uses too), made
//! non-blocking for mio.

use std::path::Path;

use dsipc_platform::SocketFile;

use crate::ListenError;

/// Binds a non-blocking listener at `path` with mode 0600 (owner only).
///
/// This is [`dsipc_platform::bind_private`] (see there for the details). What is already at
/// `path` decides:
/// - nothing: bind;
/// - a socket nobody listens on (connect is refused: left by a dead process): it is
///   removed, then bind;
/// - a socket with a live listener: [`ListenError::InUse`];
/// - anything else (a file, a directory, a symlink...): [`ListenError::NotASocket`], and
///   it is left alone.
///
/// The socket is made 0600 before it is linked to `path`, so nobody else can ever connect.
/// The socket file stays when the listener is dropped (a later bind replaces it as stale);
/// the [`Reactor`](crate::Reactor)'s listeners remove theirs.
pub fn bind_private(path: &Path) -> Result<mio::net::UnixListener, ListenError> {
    bind_guarded(path).map(|(listener, file)| {
        file.keep();
        listener
    })
}

/// [`bind_private`], with the guard that removes the socket file (if still ours) on drop.
pub(crate) fn bind_guarded(
    path: &Path,
) -> Result<(mio::net::UnixListener, SocketFile), ListenError> {
    let private = dsipc_platform::bind_private(path)?;
    private.set_nonblocking()?;
    let (listener, file) = private.into_parts();
    Ok((mio::net::UnixListener::from_std(listener), file))
}
