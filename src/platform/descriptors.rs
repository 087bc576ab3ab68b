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

/// What is left to read in `fd` when it is a pipe whose writers have
/// all gone, in bytes: the whole input is there, and no read of it will
/// wait. `None` otherwise, or where that cannot be told: a named FIFO may
/// be opened by a new writer; outside Linux (and under `portable`) it is
/// never told.
pub fn ended_pipe(fd: std::os::fd::BorrowedFd<'_>) -> Option<usize> {
    ended::ended_pipe(fd)
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod ended {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    use std::os::fd::{AsRawFd, BorrowedFd};

    pub fn ended_pipe(fd: BorrowedFd<'_>) -> Option<usize> {
        // An anonymous pipe reads as `pipe:[inode]` (proc(5)).
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let link = rustix::fs::readlinkat(rustix::fs::CWD, path, Vec::new()).ok()?;
        if !link.as_bytes().starts_with(b"pipe:") {
            return None;
        }
        // POLLHUP: no writer is left (pipe(7)).
        let mut pfd = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
        poll(&mut pfd, Some(&Timespec::default())).ok()?;
        if !pfd[0].revents().contains(PollFlags::HUP) {
            return None;
        }
        rustix::io::ioctl_fionread(fd).ok().map(|n| n as usize)
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
mod ended {
    pub fn ended_pipe(_fd: std::os::fd::BorrowedFd<'_>) -> Option<usize> {
        None
    }
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

    /// A pipe with no writer left tells what it holds; one a writer still
    /// holds, a named FIFO and a file tell nothing.
    #[cfg(all(target_os = "linux", not(feature = "portable")))]
    #[test]
    fn an_ended_pipe_tells_what_it_holds_and_nothing_else_does() {
        use std::os::fd::AsFd;
        use std::os::unix::fs::OpenOptionsExt;
        let (read, write) = pipe().unwrap();
        assert_eq!(rustix::io::write(&write, b"x\ny\n"), Ok(4));
        assert_eq!(ended_pipe(read.as_fd()), None, "a writer is left");
        drop(write);
        assert_eq!(ended_pipe(read.as_fd()), Some(4));

        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        let named = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo)
            .unwrap();
        // Written to, and its writer gone: a new one may still come.
        let writer = std::fs::OpenOptions::new().write(true).open(&fifo);
        assert_eq!(rustix::io::write(writer.unwrap(), b"x\n"), Ok(2));
        assert_eq!(ended_pipe(named.as_fd()), None, "a named FIFO");
        let plain = tempfile::tempfile().unwrap();
        assert_eq!(ended_pipe(plain.as_fd()), None, "a file");
    }
}
