//! What drip asks of the operating system that Linux offers through calls
//! of its own, each with the path the other systems (macOS, FreeBSD) take,
//! chosen at compile time: nowhere else in drip names a Linux-only call
//! (`tests/platform.rs` checks). One file per concern:
//!
//! - [`child`]: waiting for a job's end with a time limit (a pidfd on
//!   Linux, kqueue's process filter on macOS and FreeBSD, else none: the
//!   caller looks at the job now and then);
//! - [`write`]: a write to stdout that never waits (RWF_NOWAIT on Linux;
//!   none elsewhere, so what goes to a pipe or a socket is left to the
//!   writer thread);
//! - [`descriptors`]: a pipe and a socket made non-blocking and closed on
//!   exec (at once on Linux and FreeBSD, right after on macOS); whether
//!   stdin is a pipe with no writer left, and how much it holds (its
//!   `/proc/self/fd` link on Linux; elsewhere never told);
//! - [`peer`]: the control socket's peer's uid (`SO_PEERCRED` on Linux,
//!   getpeereid(3) on macOS and FreeBSD);
//! - [`program`]: drip's own program, started again as the jobs' warden
//!   (`/proc/self/exe` on Linux, `current_exe` elsewhere);
//! - [`host`]: this boot's identity and the host's name
//!   (`/proc/sys/kernel/random/boot_id` on Linux, `sysctl
//!   kern.bootsessionuuid` or `kern.boottime` on macOS and FreeBSD;
//!   uname(3)'s node name everywhere).
//!
//! The cargo feature `portable` makes a Linux build take the other
//! systems' paths wherever they can run on Linux (the set-after flags, no
//! job watch, no RWF_NOWAIT), so the tests run them too. kqueue,
//! getpeereid(3) and the sysctls have no Linux counterpart: a Linux build
//! keeps its own for those, and the other targets are checked by
//! `cargo clippy --target` in CI.
//!
//! The few `unsafe` calls here are the ones rustix does not wrap (or
//! wraps as `unsafe`): kevent(2), getpeereid(3) and sysctl(3), each with
//! its reason.

pub mod child;
pub mod descriptors;
pub mod host;
pub mod peer;
pub mod program;
pub mod write;
