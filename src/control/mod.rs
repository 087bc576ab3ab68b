//! Steering a running drip: `drip ctl`.
//!
//! Every running drip (unless `--no-control`) listens on a Unix socket in
//! the directory of drip's state files ([`socket_dir`]: `$XDG_RUNTIME_DIR/drip`
//! or `/tmp/drip-$UID`, mode 0700, this user's alone), named by its pid and
//! its `--name` ([`SocketName`]). The socket's thread ([`server`]) admits
//! only its own user (the peer's uid from the kernel: `SO_PEERCRED`, or
//! getpeereid(3) on macOS and FreeBSD) and answers one request per
//! connection through the wiring's [`server::Steer`]; [`protocol`] says
//! what may be asked and how; [`client`] is `drip ctl`.

pub mod client;
pub mod protocol;
pub(crate) mod server;

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The directory of the control sockets: the state files' directory
/// ([`crate::shared::file::state_dir`]).
pub fn socket_dir() -> PathBuf {
    crate::shared::file::state_dir()
}

/// Make `dir` (mode 0700, not its parents) if it is not there, and check
/// that it is a directory of this user's that no one else may enter.
///
/// # Errors
/// It cannot be made, or is not this user's alone: why, in words.
pub(crate) fn ensure_dir(dir: &Path) -> Result<(), String> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(format!("control directory {}: {e}", dir.display()));
        }
        _ => {}
    }
    check_dir(dir).map_err(|why| format!("{why}; fix it, or run with --no-control"))
}

/// Check that `dir` is a directory of this user's that no one else may
/// enter (mode 0700): sockets in any other may be anyone's.
///
/// # Errors
/// It cannot be looked at, or is not this user's alone: why, in words.
pub(crate) fn check_dir(dir: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(dir)
        .map_err(|e| format!("control directory {}: {e}", dir.display()))?;
    let mine = meta.uid() == rustix::process::getuid().as_raw();
    if !meta.is_dir() || !mine || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "control directory {}: not a directory of this user's that only it may enter (mode 0700)",
            dir.display()
        ));
    }
    Ok(())
}

/// The suffix of a control socket's file name.
const SUFFIX: &str = ".ctl";

/// A control socket's file name: `PID.ctl`, or `PID.NAME.ctl` with
/// `--name NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketName {
    /// The drip's process id.
    pub pid: u32,
    /// Its `--name`, if given.
    pub name: Option<String>,
}

impl SocketName {
    /// The file name in [`socket_dir`].
    pub fn file_name(&self) -> String {
        match &self.name {
            Some(name) => format!("{}.{name}{SUFFIX}", self.pid),
            None => format!("{}{SUFFIX}", self.pid),
        }
    }

    /// The socket named `file`, if it is one.
    pub fn parse(file: &str) -> Option<SocketName> {
        let stem = file.strip_suffix(SUFFIX)?;
        let (pid, name) = match stem.split_once('.') {
            Some((pid, name)) => (pid, Some(name.to_string())),
            None => (stem, None),
        };
        Some(SocketName {
            pid: pid.parse().ok()?,
            name: name.filter(|n| check_name(n).is_ok()),
        })
    }
}

/// Check a `--name`: 1 to 64 letters, digits, `_` and `-`, not all digits
/// (a target of digits is a pid).
///
/// # Errors
/// Why the name cannot be used.
pub fn check_name(name: &str) -> Result<String, String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        return Err("1 to 64 letters, digits, '_' and '-'".to_string());
    }
    if name.bytes().all(|b| b.is_ascii_digit()) {
        return Err("not all digits (a number names a pid)".to_string());
    }
    Ok(name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names_round_trip() {
        for name in [None, Some("nightly-batch".to_string())] {
            let s = SocketName { pid: 4242, name };
            assert_eq!(SocketName::parse(&s.file_name()), Some(s));
        }
        assert_eq!(SocketName::parse("x.json"), None);
        assert_eq!(SocketName::parse("abc.ctl"), None);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("batch_2-a").is_ok());
        for bad in ["", "1234", "a.b", "a/b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_directory_must_be_this_users_alone() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("drip");
        ensure_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o750)).unwrap();
        assert!(ensure_dir(&dir).unwrap_err().contains("only it may enter"));
        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        assert!(ensure_dir(&file).is_err());
    }
}
