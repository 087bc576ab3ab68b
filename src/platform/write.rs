//! A write to stdout at its file position, and one that never waits for
//! a slow consumer. Linux has the second for pipes, sockets and devices
//! (pwritev2(2) with RWF_NOWAIT, the file's own flags untouched: stdout's
//! O_NONBLOCK would be every process's sharing it). The other systems have
//! no such call: there, and under the `portable` feature on Linux, a write
//! that must not wait fails with EOPNOTSUPP, as on a Linux kernel without
//! it, and the caller leaves what it would have written to the writer
//! thread ([`crate::output::Direct`]).

use std::io;
use std::os::fd::BorrowedFd;

/// Write `buf` to `fd` at its file position; with `nowait`, only what can
/// be written without waiting: fewer bytes than asked, or `WouldBlock`
/// when none fit. `nowait` fails with EOPNOTSUPP, EINVAL or ENOSYS where
/// the file, the kernel or the system cannot do it (every system but
/// Linux).
///
/// # Errors
/// As write(2).
pub fn write_at_position(fd: BorrowedFd<'_>, buf: &[u8], nowait: bool) -> io::Result<usize> {
    imp::write_at_position(fd, buf, nowait)
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod imp {
    use super::{io, BorrowedFd};

    pub fn write_at_position(fd: BorrowedFd<'_>, buf: &[u8], nowait: bool) -> io::Result<usize> {
        use rustix::io::ReadWriteFlags;
        let mut flags = ReadWriteFlags::empty();
        flags.set(ReadWriteFlags::NOWAIT, nowait);
        let iov = [io::IoSlice::new(buf)];
        // Offset u64::MAX (-1): the file position, as write(2).
        Ok(rustix::io::pwritev2(fd, &iov, u64::MAX, flags)?)
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
mod imp {
    use super::{io, BorrowedFd};

    pub fn write_at_position(fd: BorrowedFd<'_>, buf: &[u8], nowait: bool) -> io::Result<usize> {
        if nowait {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        Ok(rustix::io::write(fd, buf)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_write_that_may_wait_goes_at_the_file_position() {
        use std::io::{Read, Seek};
        let mut file = tempfile::tempfile().unwrap();
        assert_eq!(write_at_position(file.as_fd(), b"ab", false).unwrap(), 2);
        assert_eq!(write_at_position(file.as_fd(), b"cd", false).unwrap(), 2);
        let mut text = String::new();
        file.rewind().unwrap();
        file.read_to_string(&mut text).unwrap();
        assert_eq!(text, "abcd");
    }

    #[test]
    fn a_write_that_must_not_wait_never_waits_or_is_refused() {
        let (read, write) = crate::platform::descriptors::pipe().unwrap();
        crate::sys::set_blocking(write.as_fd()).unwrap();
        let chunk = [b'x'; 4096];
        let mut total = 0;
        loop {
            match write_at_position(write.as_fd(), &chunk, true) {
                Ok(n) => total += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    // Refused (elsewhere always, on Linux by an old kernel).
                    let refused = [libc::EOPNOTSUPP, libc::EINVAL, libc::ENOSYS];
                    assert!(refused.contains(&e.raw_os_error().unwrap_or(0)), "{e}");
                    assert_eq!(total, 0);
                    break;
                }
            }
            assert!(total < 1 << 30, "a full pipe took more");
        }
        drop(read);
    }
}
