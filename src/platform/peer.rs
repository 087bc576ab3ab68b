//! The uid of the process at the other end of a Unix socket, from the
//! kernel: `SO_PEERCRED` on Linux (the `portable` feature too: Linux has
//! no getpeereid(3)), getpeereid(3) on macOS and FreeBSD (their
//! `LOCAL_PEERCRED`). Elsewhere there is no way to know, and the peer is
//! refused: the check is never skipped.

use std::io;
use std::os::unix::net::UnixStream;

/// The uid of the process at the other end of `stream`.
///
/// # Errors
/// The kernel does not say, or the system cannot (`Unsupported`).
pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
    imp::peer_uid(stream)
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{io, UnixStream};

    pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
        let cred = rustix::net::sockopt::socket_peercred(stream)?;
        Ok(cred.uid.as_raw())
    }
}

#[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
mod imp {
    #![allow(unsafe_code)]
    use super::{io, UnixStream};
    use std::os::fd::AsRawFd;

    pub fn peer_uid(stream: &UnixStream) -> io::Result<u32> {
        let mut uid: libc::uid_t = 0;
        let mut gid: libc::gid_t = 0;
        // SAFETY: the descriptor is `stream`'s, open while it is borrowed;
        // `uid` and `gid` are valid for writes of their types.
        let rc = unsafe { libc::getpeereid(stream.as_raw_fd(), &mut uid, &mut gid) };
        if rc == 0 {
            Ok(uid)
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

#[cfg(not(any(target_os = "linux", target_vendor = "apple", target_os = "freebsd")))]
mod imp {
    use super::{io, UnixStream};

    pub fn peer_uid(_stream: &UnixStream) -> io::Result<u32> {
        Err(io::ErrorKind::Unsupported.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_of_a_socket_pair_is_this_user() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), rustix::process::getuid().as_raw());
    }
}
