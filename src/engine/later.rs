//! A quick run: what a run starts only once it needs it (the monitor
//! thread, the control socket), an input all there read on the main
//! thread, and how long a run may go without them. A one-record run
//! (`echo x | drip -r inf`) starts no thread and makes no socket.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::cli::{Config, Input};
use crate::control::server::Server;
use crate::monitor::Monitor;
use crate::state::Shared;
use crate::steer::Steering;
use crate::sys::Unpoisoned;

/// What a run starts once it needs it (see [`QUICK_RUN`]): the monitor
/// thread, and the control socket (unless `--no-control`), whose thread
/// the monitor's starts.
pub(super) struct Later {
    pub(super) monitor: Monitor,
    /// The control socket's steering, until the socket is made.
    pub(super) steering: Option<Arc<Steering>>,
    pub(super) control: Option<Server>,
}

impl Later {
    /// Make the control socket and start the monitor, if not done yet.
    /// After the signal handlers: whatever way drip leaves from here,
    /// the socket goes.
    ///
    /// # Errors
    /// The socket cannot be made, or the monitor started.
    pub(super) fn start(&mut self, config: &Config) -> Result<()> {
        if let Some(steering) = self.steering.take() {
            if let Some((server, accept)) = super::steering::start_control(config, steering)? {
                self.monitor.set_control(accept);
                self.control = Some(server);
            }
        }
        self.monitor.start_now()
    }
}

/// The most an input read on the main thread may hold, in bytes (a
/// pipe's default size).
const AT_HAND: usize = 64 * 1024;

/// Whether the input may be read to its end on the main thread, before
/// the writer starts, sparing a one-record run the reader's thread: stdin
/// alone, a pipe whose writers are all gone holding at most [`AT_HAND`]
/// bytes, no more than the bucket takes (records, each at least a byte,
/// and bytes), so that reading never waits, for input or for room. Not
/// with jobs, limits per key or `--share`, where records may wait for
/// more than room.
pub(super) fn input_at_hand(config: &Config) -> bool {
    use std::os::fd::AsFd;
    if config.inputs != [Input::Stdin]
        || config.jobs.is_some()
        || config.key.is_some()
        || config.share.is_some()
    {
        return false;
    }
    let Some(bytes) = crate::platform::descriptors::ended_pipe(std::io::stdin().as_fd()) else {
        return false;
    };
    bytes <= AT_HAND
        && bytes <= config.capacity
        && config.capacity_bytes.map_or(true, |most| bytes <= most)
}

/// How long a run may go without the monitor thread: a signal, a client
/// of the control socket or a reader of stdout gone away waits at most
/// this long to be seen (the signal in its pipe, the client in the
/// socket's queue). A one-record run (`echo x | drip -r inf`) ends well
/// within it and never starts the thread: 0.1 ms of its 1 ms.
pub(super) const QUICK_RUN: Duration = Duration::from_millis(5);

/// Whether the run is over but for the writer's last look, waiting up to
/// `limit` for it: the input read to its end and nothing left to wait
/// for, nor to write (nor a record begun to finish) unless `never_waits`
/// (stdout takes a write at once:
/// a file, the null device). Woken as the writer is (the reader's
/// arrivals, its end, a stop); `false` at the first records to pace, or
/// to write where a write may wait, as the writer then has work that may
/// take long.
pub(super) fn ended_within(shared: &Shared, limit: Duration, never_waits: bool) -> bool {
    let until = Instant::now() + limit;
    let mut st = shared.lock();
    loop {
        let queued = !st.adm.bucket().is_empty()
            || ((st.adm.outbox_len() > 0 || st.writing.tail.is_some()) && !never_waits)
            || st.adm.next_event().is_some()
            || st.reading.parked.is_some();
        if queued {
            return false;
        }
        if st.reading.done {
            return true;
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        st.writing.asleep = true;
        st = shared.data_ready.wait_timeout(st, left).unpoisoned().0;
        st.writing.asleep = false;
    }
}

/// Start what the run needs now: the monitor (`work`, over `listening`)
/// and the control socket for `steering` at once when the run shows or
/// tells something as it goes, runs jobs or reads its rate table per key
/// again on SIGHUP, else once it outlasts
/// [`QUICK_RUN`]; and the reader, on this thread when the input is all
/// there ([`input_at_hand`]). `room_fd`: stdout, when it is watched for
/// room. The monitor and the control socket (unless `--no-control`), and
/// the reader.
///
/// # Errors
/// The control socket cannot be made, or a thread started.
pub(super) fn start(
    config: &Config,
    shared: &Arc<Shared>,
    listening: crate::monitor::Listening,
    work: crate::monitor::Work,
    steering: Arc<Steering>,
    screen: crate::reader::Screen,
    room_fd: Option<&std::os::fd::OwnedFd>,
) -> Result<(Monitor, Option<Server>, crate::reader::Reader)> {
    let at_once = config.jobs.is_some()
        || config.stats_interval.is_some()
        || work.metrics.is_some()
        || work.reload.is_some()
        || crate::progress::lock_ui(&work.ui).showing_progress();
    let ui = Arc::clone(&work.ui);
    let mut later = Later {
        monitor: Monitor::later(listening, work),
        steering: Some(steering),
        control: None,
    };
    if at_once {
        later.start(config)?;
    }
    let reader = crate::reader::Reader::start(
        Arc::clone(shared),
        ui,
        config.inputs.clone(),
        super::files::own_files(config),
        super::steering::splitter(config, shared),
        screen,
        !at_once && input_at_hand(config),
    )?;
    let never_waits =
        room_fd.is_some_and(|fd| crate::sys::writes_never_wait(std::os::fd::AsFd::as_fd(fd)));
    if !ended_within(shared, QUICK_RUN, never_waits) {
        if let Err(e) = later.start(config) {
            shared.stop(false);
            let _ = reader.join();
            return Err(e);
        }
    }
    Ok((later.monitor, later.control, reader))
}
