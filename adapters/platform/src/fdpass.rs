//! Passing one file descriptor over a Unix stream socket with `SCM_RIGHTS`, as a user_events
//! session needs: after a CollectTracing5/6 user_events request the client sends the
//! `user_events_data` descriptor attached to one data byte, and the runtime `recvmsg`s that
//! byte with its control message (see the protocol's "passing_file_descriptor").
//!
//! A descriptor travels with the byte it is attached to: a plain `read(2)` that consumes
//! that byte discards (closes) the descriptor. A receiver must therefore read the request
//! exactly (header, then payload, as the runtime does) or read with [`recv_with_fd`].

use std::io;
use std::mem;
use std::os::unix::io::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// The data byte sent with the descriptor (the runtime reads one byte and ignores it).
pub const FD_BYTE: u8 = 0;

/// Control-message space for one descriptor, in `u64`s (8-byte aligned, as `cmsghdr` needs).
const SEND_SPACE: usize = 4;
/// Control-message space when receiving: room for a few descriptors, so that a peer sending
/// more than one does not leave any open in this process (the extra ones are closed).
const RECV_SPACE: usize = 16;

#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly"
))]
const SEND_FLAGS: i32 = libc::MSG_NOSIGNAL;
#[cfg(not(any(
    target_os = "linux",
    target_os = "android",
    target_os = "freebsd",
    target_os = "netbsd",
    target_os = "openbsd",
    target_os = "dragonfly"
)))]
const SEND_FLAGS: i32 = 0;

#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
const RECV_FLAGS: i32 = libc::MSG_CMSG_CLOEXEC;
#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
const RECV_FLAGS: i32 = 0;

/// Sends `fd` over the connected Unix stream socket `socket` with `SCM_RIGHTS`, attached to
/// one data byte ([`FD_BYTE`]), in one `sendmsg`. The caller keeps `fd` (the receiver gets
/// its own copy).
///
/// Errors are `sendmsg`'s: `BrokenPipe` (or `ConnectionReset`) when the peer has closed
/// (no `SIGPIPE` where `MSG_NOSIGNAL` exists), `WouldBlock` when a non-blocking socket is
/// full or a blocking one's send timeout expired, `InvalidInput` for a socket that cannot
/// carry descriptors. `Interrupted` is retried.
pub fn send_fd(socket: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    let mut byte = [FD_BYTE];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    let mut control = [0u64; SEND_SPACE];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(mem::size_of::<RawFd>() as u32) } as usize;
    debug_assert!(space <= mem::size_of_val(&control));
    // SAFETY: msghdr is plain old data; all zeroes is a valid (empty) value.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at `control`, aligned for cmsghdr and at least CMSG_SPACE(one
    // descriptor) long, so the first header and its data lie inside it.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null() {
            return Err(io::Error::new(
                io::ErrorKind::Other,
                "no room for the control message",
            ));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(mem::size_of::<RawFd>() as u32) as _;
        ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut RawFd, fd.as_raw_fd());
    }
    loop {
        // SAFETY: `msg` and everything it points at are alive for the call.
        let n = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, SEND_FLAGS) };
        if n >= 0 {
            // One byte cannot be sent in part: 0 would mean nothing was sent.
            return if n == 1 {
                Ok(())
            } else {
                Err(io::ErrorKind::WriteZero.into())
            };
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Reads into `buf` like `read(2)` on the Unix stream socket `socket`, and takes a
/// descriptor passed with `SCM_RIGHTS` along with those bytes. Returns the byte count (0 at
/// end of stream) and the descriptor, if one came (close-on-exec). When a peer passes
/// several descriptors with the bytes read, the first is returned and the others are
/// closed; none is ever left open. `Interrupted` is retried.
pub fn recv_with_fd(
    socket: BorrowedFd<'_>,
    buf: &mut [u8],
) -> io::Result<(usize, Option<OwnedFd>)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = [0u64; RECV_SPACE];
    loop {
        // SAFETY: msghdr is plain old data; all zeroes is a valid (empty) value.
        let mut msg: libc::msghdr = unsafe { mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = mem::size_of_val(&control) as _;
        // SAFETY: `msg` points at `buf` (through `iov`) and `control`, both alive and
        // writable for their stated lengths.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, RECV_FLAGS) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        let fds = take_fds(&msg);
        let mut fds = fds.into_iter();
        let first = fds.next();
        // Any further descriptors are closed here, by dropping them.
        drop(fds);
        if let Some(fd) = &first {
            set_cloexec(fd)?;
        }
        return Ok((n as usize, first));
    }
}

/// Every descriptor in `msg`'s `SCM_RIGHTS` control messages, owned.
fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    // SAFETY: `msg` was filled by recvmsg: its control buffer holds `msg_controllen` bytes
    // of well-formed headers, which the CMSG macros walk without leaving it; every
    // descriptor in an SCM_RIGHTS message is new in this process and owned by nobody else.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const u8;
                let header = data as usize - cmsg as usize;
                let bytes = ((*cmsg).cmsg_len as usize).saturating_sub(header);
                for i in 0..bytes / mem::size_of::<RawFd>() {
                    let fd: RawFd =
                        ptr::read_unaligned(data.add(i * mem::size_of::<RawFd>()) as *const RawFd);
                    if fd >= 0 {
                        out.push(OwnedFd::from_raw_fd(fd));
                    }
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
    }
    out
}

/// Marks a received descriptor close-on-exec where `recvmsg` could not (no
/// `MSG_CMSG_CLOEXEC`).
fn set_cloexec(fd: &OwnedFd) -> io::Result<()> {
    if RECV_FLAGS != 0 {
        return Ok(());
    }
    // SAFETY: fcntl on a descriptor we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::io::{Read, Write};
    use std::os::unix::io::AsFd;
    use std::os::unix::net::UnixStream;

    /// A pipe: (read end, write end).
    fn pipe() -> (File, File) {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe(2) fills two descriptors that nothing else owns.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: fresh descriptors, owned by the files from here on.
        unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) }
    }

    #[test]
    fn a_descriptor_travels_with_its_byte() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut rx, tx) = pipe();
        (&a).write_all(b"request").unwrap();
        send_fd(a.as_fd(), tx.as_fd()).unwrap();
        drop(tx);
        // Exactly the request first: the descriptor's byte stays queued.
        let mut req = [0u8; 7];
        (&b).read_exact(&mut req).unwrap();
        assert_eq!(&req, b"request");
        let mut one = [0xffu8; 8];
        let (n, fd) = recv_with_fd(b.as_fd(), &mut one).unwrap();
        assert_eq!((n, one[0]), (1, FD_BYTE));
        let mut passed = File::from(fd.expect("a descriptor"));
        passed.write_all(b"through the passed descriptor").unwrap();
        drop(passed);
        let mut got = Vec::new();
        rx.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"through the passed descriptor");
    }

    #[test]
    fn plain_bytes_come_without_a_descriptor() {
        let (a, b) = UnixStream::pair().unwrap();
        (&a).write_all(b"xyz").unwrap();
        let mut buf = [0u8; 8];
        let (n, fd) = recv_with_fd(b.as_fd(), &mut buf).unwrap();
        assert_eq!((n, &buf[..n]), (3, &b"xyz"[..]));
        assert!(fd.is_none());
        drop(a);
        let (n, fd) = recv_with_fd(b.as_fd(), &mut buf).unwrap();
        assert_eq!(n, 0);
        assert!(fd.is_none());
    }

    #[test]
    fn sending_to_a_closed_peer_is_broken_pipe() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let (_rx, tx) = pipe();
        let e = send_fd(a.as_fd(), tx.as_fd()).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ),
            "{:?}",
            e
        );
    }

    #[test]
    fn a_socket_that_is_not_unix_cannot_pass() {
        let (rx, tx) = pipe();
        assert!(send_fd(tx.as_fd(), rx.as_fd()).is_err());
    }
}
