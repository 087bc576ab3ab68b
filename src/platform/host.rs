//! This boot's identity and this host's name, for the state files of
//! `--share NAME` and `--share-jobs` on one host: their times are of
//! `CLOCK_MONOTONIC`, which starts again at each boot, so a state written
//! in another boot is started afresh; and a lease names its host.
//!
//! The boot's identity is Linux's `/proc/sys/kernel/random/boot_id` (the
//! `portable` feature too: Linux has no other), macOS's `sysctl
//! kern.bootsessionuuid` (`kern.boottime` on a system without it), and
//! FreeBSD's `kern.boottime`, the wall-clock time of the boot, which the
//! kernel moves when the wall clock is set (a step, not a slew): after
//! one, the state reads as another boot's and is started afresh, once, as
//! each call reads the identity anew. Elsewhere it is empty (no boot is
//! told from another).

/// This boot's identity (empty when it cannot be known), read anew at
/// each call where it can change within a boot.
pub fn boot_id() -> String {
    imp::boot_id()
}

/// This host's name (uname(3)'s node name, as gethostname(3) gives it).
pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

#[cfg(target_os = "linux")]
mod imp {
    use std::sync::OnceLock;

    /// The kernel's random id of this boot (it never changes within one).
    pub fn boot_id() -> String {
        static ID: OnceLock<String> = OnceLock::new();
        ID.get_or_init(|| {
            std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        })
        .clone()
    }
}

#[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
mod imp {
    #![allow(unsafe_code)]
    use std::ffi::CStr;

    #[cfg(target_vendor = "apple")]
    pub fn boot_id() -> String {
        // A UUID, 36 characters and a NUL.
        let mut text = [0u8; 64];
        match sysctl(c"kern.bootsessionuuid", &mut text) {
            Some(len) => CStr::from_bytes_until_nul(&text[..len])
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            None => boot_time(),
        }
    }

    #[cfg(target_os = "freebsd")]
    pub fn boot_id() -> String {
        boot_time()
    }

    /// `kern.boottime`, as `boottime:SECONDS.MICROSECONDS`.
    fn boot_time() -> String {
        let mut time = [0u8; std::mem::size_of::<libc::timeval>()];
        let Some(len) = sysctl(c"kern.boottime", &mut time) else {
            return String::new();
        };
        if len != time.len() {
            return String::new();
        }
        // SAFETY: `time` holds a whole timeval the kernel wrote (len is
        // its size); any bytes are a valid timeval (two integers), and
        // the read is unaligned-safe.
        let tv: libc::timeval = unsafe { std::ptr::read_unaligned(time.as_ptr().cast()) };
        format!("boottime:{}.{:06}", tv.tv_sec, tv.tv_usec)
    }

    /// Read the sysctl `name` into `out`; the bytes written.
    fn sysctl(name: &CStr, out: &mut [u8]) -> Option<usize> {
        let mut len = out.len();
        // SAFETY: `name` is NUL-terminated; `out` is valid for writes of
        // `len` bytes, and the kernel writes at most that many (it fails
        // with ENOMEM rather); no new value is given (null, 0).
        let rc = unsafe {
            libc::sysctlbyname(
                name.as_ptr(),
                out.as_mut_ptr().cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        (rc == 0).then_some(len)
    }
}

#[cfg(not(any(target_os = "linux", target_vendor = "apple", target_os = "freebsd")))]
mod imp {
    pub fn boot_id() -> String {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boot_and_the_host_are_named() {
        let id = boot_id();
        assert!(!id.is_empty());
        assert_eq!(id, boot_id());
        let host = host_name();
        assert!(!host.is_empty() && !host.contains('\n'), "{host:?}");
        #[cfg(target_os = "linux")]
        {
            let linux = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
            assert_eq!(host, linux.trim());
        }
    }
}
