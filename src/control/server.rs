//! The control socket of a running drip: bound as drip starts, and a
//! thread (started by the monitor's once a first client connects,
//! [`Accept::spawn`]) that accepts clients and
//! answers each on a thread of its own (at most [`MAX_CLIENTS`] at once, so
//! that a client that sends nothing holds up no other), checking that it
//! runs as drip's own user (the peer's uid from the kernel:
//! [`crate::platform::peer`]), reading one request line and
//! answering it through [`Steer`], which the wiring implements. The socket is removed at every way out drip has: the end of
//! the run ([`Server::finish`], or the server dropped on an error) and a
//! second signal's exit ([`remove_socket`]).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use anyhow::{Context, Result};

use super::protocol::{self, Request};
use super::{ensure_dir, socket_dir, SocketName};
use crate::sys::Unpoisoned;

/// What the control thread may do with the drip it serves; the wiring
/// answers each request under the drip's own lock and rules.
pub(crate) trait Steer: Send + Sync {
    /// Answer `request`: a JSON value, or why not, in words.
    fn answer(&self, request: &Request) -> Result<serde_json::Value, String>;
}

/// How long a client may take to send its line or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// The clients answered at once, at most; more wait to be accepted until
/// one is answered or its [`CLIENT_TIMEOUT`] has passed.
const MAX_CLIENTS: usize = 16;

/// The socket of this process, for [`remove_socket`].
static SOCKET: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Remove this process's control socket now, if it has one (before an
/// exit that skips the usual way out).
pub(crate) fn remove_socket() {
    let path = SOCKET.lock().unpoisoned().take();
    if let Some(path) = path {
        let _ = std::fs::remove_file(path);
    }
}

/// The running control socket.
#[derive(Debug)]
pub(crate) struct Server {
    path: PathBuf,
    stop: Arc<AtomicBool>,
}

/// The control socket's thread, to be started ([`Accept::spawn`]) once a
/// client connects: the socket listens from [`Server::start`] on, so a
/// client can connect at once and waits in its queue until the thread
/// accepts it. A run no one steers starts no such thread.
pub(crate) struct Accept {
    listener: UnixListener,
    steer: Arc<dyn Steer>,
    stop: Arc<AtomicBool>,
}

impl Accept {
    /// The listening socket's descriptor, a duplicate: readable once a
    /// client waits to be accepted, the moment to [`Accept::spawn`].
    ///
    /// # Errors
    /// Out of descriptors.
    pub(crate) fn doorbell(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.listener.as_fd().try_clone_to_owned()
    }

    /// Start the thread that accepts and answers clients until the
    /// server's stop; one that cannot start is said on stderr, and then
    /// `drip ctl` cannot reach this drip.
    pub(crate) fn spawn(self) {
        let Accept {
            listener,
            steer,
            stop,
        } = self;
        let started = crate::sys::spawn("drip-control", move || serve(&listener, &steer, &stop));
        if let Err(e) = started {
            let why = crate::sys::describe(&e);
            let _ = writeln!(
                std::io::stderr(),
                "drip: starting the control thread: {why}"
            );
        }
    }
}

impl Server {
    /// Listen on this process's socket (named by its pid and `name`) in
    /// [`socket_dir`], to answer through `steer` once the [`Accept`]
    /// returned is spawned.
    ///
    /// # Errors
    /// The directory cannot be made, is not this user's alone, or the
    /// socket cannot be bound.
    pub(crate) fn start(name: Option<&str>, steer: Arc<dyn Steer>) -> Result<(Server, Accept)> {
        let dir = socket_dir();
        ensure_dir(&dir).map_err(anyhow::Error::msg)?;
        let socket = SocketName {
            pid: std::process::id(),
            name: name.map(str::to_string),
        };
        let path = dir.join(socket.file_name());
        // Bound under a name of its own and renamed into place once it
        // listens, so a client that sees the socket can connect (between
        // bind(2) and listen(2) it would be refused); the rename replaces
        // a socket left by an earlier process of this pid (killed).
        let binding = dir.join(format!(".{}.binding", socket.pid));
        let _ = std::fs::remove_file(&binding);
        let listener = UnixListener::bind(&binding)
            .and_then(|listener| {
                let mode = std::fs::Permissions::from_mode(0o600);
                std::fs::set_permissions(&binding, mode)?;
                std::fs::rename(&binding, &path)?;
                Ok(listener)
            })
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&binding);
            })
            .with_context(|| format!("control socket {}", path.display()))?;
        *SOCKET.lock().unpoisoned() = Some(path.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let accept = Accept {
            listener,
            steer,
            stop: Arc::clone(&stop),
        };
        Ok((Server { path, stop }, accept))
    }

    /// Stop answering and remove the socket.
    pub(crate) fn finish(mut self) {
        self.shut();
    }

    /// The thread sees `stop` within 50 ms and ends; it is not waited
    /// for (a client being answered has at most [`CLIENT_TIMEOUT`]).
    fn shut(&mut self) {
        if self.stop.swap(true, Ordering::SeqCst) {
            return; // shut already (finish, then the drop)
        }
        let _ = std::fs::remove_file(&self.path);
        SOCKET.lock().unpoisoned().take();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shut();
    }
}

/// Accept clients until `stop`, answering each on a thread of its own;
/// while [`MAX_CLIENTS`] are being answered, the next waits (in the
/// listener's queue) until one is done: woken as it is, and looking at
/// `stop` as often as the wait for a client does.
fn serve(listener: &UnixListener, steer: &Arc<dyn Steer>, stop: &AtomicBool) {
    let _ = listener.set_nonblocking(true);
    let busy: Arc<Busy> = Arc::default();
    while !stop.load(Ordering::SeqCst) {
        let answering = busy.lock();
        if *answering >= MAX_CLIENTS {
            drop(busy.done.wait_timeout(answering, STOP_LOOK));
            continue;
        }
        drop(answering);
        match listener.accept() {
            Ok((stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let steer = Arc::clone(steer);
                let client = Client::new(&busy);
                // A thread that cannot start drops the stream: the client
                // is told nothing and says so.
                let _ = crate::sys::spawn("drip-control-client", move || {
                    answer(stream, &*steer);
                    drop(client);
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => wait_for_client(listener),
            // A failed accept (out of descriptors, say) has nothing to
            // wait on: it is tried again after a pause.
            Err(_) => std::thread::sleep(STOP_LOOK),
        }
    }
}

/// How often the server looks at its stop while it waits.
const STOP_LOOK: Duration = Duration::from_millis(50);

/// The clients being answered, and the bell a client rings when done.
#[derive(Default)]
struct Busy {
    count: Mutex<usize>,
    done: Condvar,
}

impl Busy {
    fn lock(&self) -> MutexGuard<'_, usize> {
        self.count.lock().unpoisoned()
    }
}

/// Wait for a client on `listener`, at most 50 ms (so that `stop` is
/// seen: the server's stop is a flag, set as drip ends, that no one wakes
/// this thread for).
fn wait_for_client(listener: &UnixListener) {
    use std::os::fd::AsFd;
    let fd = listener.as_fd();
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    let timeout = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 50_000_000,
    };
    let _ = rustix::event::poll(&mut fds, Some(&timeout));
}

/// One client being answered: counted in `busy` while it lives.
struct Client(Arc<Busy>);

impl Client {
    fn new(busy: &Arc<Busy>) -> Client {
        *busy.lock() += 1;
        Client(Arc::clone(busy))
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        *self.0.lock() -= 1;
        self.0.done.notify_one();
    }
}

/// Whether a peer running as `peer` may steer a drip running as `own`:
/// only the same user (root included: it steers its own drips only).
pub(crate) fn admitted(peer: u32, own: u32) -> bool {
    peer == own
}

/// Read one request from `stream` and answer it.
fn answer(stream: UnixStream, steer: &dyn Steer) {
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    let own = rustix::process::getuid().as_raw();
    // The line is read whatever the peer: an answer to an unread request
    // could be lost to a reset.
    let words = read_request(&stream);
    let reply = match crate::platform::peer::peer_uid(&stream) {
        Ok(peer) if admitted(peer, own) => match words {
            Ok(words) => reply(&words, steer),
            Err(why) => protocol::error_reply(&why),
        },
        Ok(peer) => protocol::error_reply(&format!(
            "uid {peer} may not steer this drip (it runs as uid {own})"
        )),
        Err(e) => protocol::error_reply(&format!("the peer's credentials: {e}")),
    };
    let mut stream = stream;
    let _ = writeln!(stream, "{reply}");
}

/// The request line on `stream`, as words: at most
/// [`protocol::MAX_REQUEST`] bytes, its newline included, all of it within
/// [`CLIENT_TIMEOUT`] (a client that sends a byte now and then holds no
/// thread longer).
fn read_request(mut stream: &UnixStream) -> Result<Vec<String>, String> {
    use std::io::Read;
    let most = protocol::MAX_REQUEST;
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    let mut line = Vec::new();
    let mut buf = [0u8; 1024];
    while !line.contains(&b'\n') && line.len() <= most {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err("no request in time".into());
        }
        let _ = stream.set_read_timeout(Some(left));
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => line.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err("no request in time".into())
            }
            Err(e) => return Err(format!("reading the request: {e}")),
        }
    }
    // The first line only: nothing after it is read as part of it.
    let end = line
        .iter()
        .position(|&b| b == b'\n')
        .map_or(line.len(), |i| i + 1);
    if end > most {
        return Err(format!("the request is too long (over {most} bytes)"));
    }
    serde_json::from_slice(line[..end].trim_ascii_end())
        .map_err(|_| "a request is a JSON array of words".into())
}

/// The answer to `words`.
fn reply(words: &[String], steer: &dyn Steer) -> String {
    match protocol::parse(words).and_then(|request| steer.answer(&request)) {
        Ok(value) => value.to_string(),
        Err(why) => protocol::error_reply(&why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_user_is_admitted() {
        assert!(admitted(1000, 1000));
        assert!(!admitted(0, 1000));
        assert!(!admitted(1000, 0));
        assert!(!admitted(65534, 1000));
    }
}
