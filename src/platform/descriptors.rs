//! A pipe and a Unix socket made non-blocking and closed on exec. Linux
//! and FreeBSD set the flags as they make the descriptor (pipe2(2),
//! `SOCK_CLOEXEC | SOCK_NONBLOCK`); macOS has neither, so there (and under
//! the `portable` feature on Linux) they are set right after with
//! fcntl(2). In between, a job started by another thread at that moment
//! could inherit the descriptor: drip makes its pipes before any job
//! starts, and a `drip ctl` client starts none.

use rustix::io::Result;
use std::os::fd::OwnedFd;

/// A pipe (read end, write end), both non-blocking and closed on exec.
///
/// # Errors
/// When the process is out of file descriptors.
pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    imp::pipe()
}

/// A Unix stream socket, non-blocking and closed on exec.
///
/// # Errors
/// When the process is out of file descriptors.
pub fn unix_stream() -> Result<OwnedFd> {
    imp::unix_stream()
}

#[cfg(any(
    all(target_os = "linux", not(feature = "portable")),
    target_os = "freebsd"
))]
mod imp {
    use super::{OwnedFd, Result};
    use rustix::net::{socket_with, AddressFamily, SocketFlags, SocketType};
    use rustix::pipe::{pipe_with, PipeFlags};

    pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
        pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)
    }

    pub fn unix_stream() -> Result<OwnedFd> {
        let flags = SocketFlags::CLOEXEC | SocketFlags::NONBLOCK;
        socket_with(AddressFamily::UNIX, SocketType::STREAM, flags, None)
    }
}

#[cfg(not(any(
    all(target_os = "linux", not(feature = "portable")),
    target_os = "freebsd"
)))]
mod imp {
    use super::{OwnedFd, Result};
    use rustix::net::{socket, AddressFamily, SocketType};

    pub fn pipe() -> Result<(OwnedFd, OwnedFd)> {
        let (read, write) = rustix::pipe::pipe()?;
        set_flags(&read)?;
        set_flags(&write)?;
        Ok((read, write))
    }

    pub fn unix_stream() -> Result<OwnedFd> {
        let fd = socket(AddressFamily::UNIX, SocketType::STREAM, None)?;
        set_flags(&fd)?;
        Ok(fd)
    }

    /// Close `fd` on exec and make it non-blocking.
    fn set_flags(fd: &OwnedFd) -> Result<()> {
        use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
        use rustix::io::{fcntl_getfd, fcntl_setfd, FdFlags};
        fcntl_setfd(fd, fcntl_getfd(fd)? | FdFlags::CLOEXEC)?;
        fcntl_setfl(fd, fcntl_getfl(fd)? | OFlags::NONBLOCK)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::fs::{fcntl_getfl, OFlags};
    use rustix::io::{fcntl_getfd, FdFlags};

    fn flagged(fd: &OwnedFd) -> bool {
        fcntl_getfd(fd).unwrap().contains(FdFlags::CLOEXEC)
            && fcntl_getfl(fd).unwrap().contains(OFlags::NONBLOCK)
    }

    #[test]
    fn a_pipe_is_made_non_blocking_and_closed_on_exec() {
        let (read, write) = pipe().unwrap();
        assert!(flagged(&read) && flagged(&write));
        assert_eq!(rustix::io::write(&write, b"x"), Ok(1));
        let mut byte = [0u8; 1];
        assert_eq!(rustix::io::read(&read, &mut byte), Ok(1));
        assert_eq!(
            rustix::io::read(&read, &mut byte),
            Err(rustix::io::Errno::AGAIN)
        );
    }

    #[test]
    fn a_socket_is_made_non_blocking_and_closed_on_exec() {
        assert!(flagged(&unix_stream().unwrap()));
    }
}
