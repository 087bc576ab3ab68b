//! drip's own program, to start again as the jobs' warden
//! ([`crate::jobs::warden`]): on Linux `/proc/self/exe`, which names the
//! running program even once its file was replaced or removed (a `cargo
//! install` over a running drip); elsewhere, and under the `portable`
//! feature, the path the system gives ([`std::env::current_exe`]), which
//! must still lead to the same program.

use std::io;
use std::path::PathBuf;

/// The path that starts this program anew.
///
/// # Errors
/// The system cannot tell (on Linux without `/proc`, as elsewhere:
/// [`std::env::current_exe`]'s errors).
pub fn this_program() -> io::Result<PathBuf> {
    imp::this_program()
}

#[cfg(all(target_os = "linux", not(feature = "portable")))]
mod imp {
    use super::{io, PathBuf};

    pub fn this_program() -> io::Result<PathBuf> {
        let own = PathBuf::from("/proc/self/exe");
        if own.exists() {
            return Ok(own);
        }
        std::env::current_exe()
    }
}

#[cfg(not(all(target_os = "linux", not(feature = "portable"))))]
mod imp {
    use super::{io, PathBuf};

    pub fn this_program() -> io::Result<PathBuf> {
        std::env::current_exe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_program_is_a_file_that_runs() {
        let path = this_program().unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert!(meta.is_file(), "{}", path.display());
    }
}
