//! The parts of the pool every job and every hook reaches: the run's
//! state, the gate, the slots, the process groups, drip's stdout, the
//! headers files' directory and how records are read. Below the pool
//! ([`super::pool`], which holds them beside its hooks) and the hooks
//! ([`super::hooks`], handed them at each moment of a job's life).

use std::io::Write;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::attempt::{HeadersDir, Unwritten};
use super::gate::{GateControl, Scope};
use super::groups::Groups;
use super::slots::Slots;
use super::JobConfig;
use crate::key::KeySpec;
use crate::state::Shared;

/// The parts of the pool every job and hook reaches.
pub(crate) struct PoolParts {
    pub(super) shared: Arc<Shared>,
    pub(super) cfg: JobConfig,
    pub(super) gate: Arc<GateControl>,
    /// drip's stdout, where each job's output goes whole.
    pub(super) out: Mutex<Box<dyn Write + Send>>,
    /// The slots, the records being run, and the waits.
    pub(super) slots: Slots,
    /// The jobs' process groups, their warden, and leaving.
    pub(super) groups: Groups,
    /// The directory of the jobs' headers files.
    pub(super) headers: HeadersDir,
    /// How the records are read: their delimiter, their key.
    pub(super) records: Records,
}

/// A duration in ns (saturating).
pub(super) fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl PoolParts {
    /// Whether drip is stopping (a signal, an error).
    pub(super) fn stopping(&self) -> bool {
        self.shared.stops.now.load(Ordering::Relaxed)
    }

    /// Pass output on with `pass` from a thread a second signal interrupts
    /// ([`Jobs::interrupt_output`]): a write blocked on a stalled stdout or
    /// stderr then gives up (`give_up`: drip is leaving), rather than
    /// holding drip's exit. What was not written is counted.
    pub(super) fn passing(&self, pass: impl FnOnce(&dyn Fn() -> bool) -> Unwritten) {
        let give_up = || self.shared.stops.leaving();
        let cut = self.groups.passing(|| pass(&give_up));
        let mut table = self.slots.lock();
        table.unwritten = table.unwritten.and(cut);
    }
}

/// How the records are read: where one ends, and with `--key` its key.
#[derive(Debug)]
pub(crate) struct Records {
    /// The record delimiter, left out of the record in arguments.
    pub(crate) delimiter: u8,
    /// With `--key`: an overload pauses the refused record's key only.
    pub(crate) key: Option<KeySpec>,
}

impl Records {
    /// The record without its delimiter.
    pub(super) fn body_of<'a>(&self, bytes: &'a [u8]) -> &'a [u8] {
        match bytes.split_last() {
            Some((&last, body)) if last == self.delimiter => body,
            _ => bytes,
        }
    }

    /// The key of `record` (its delimiter included) as the keyed queues
    /// read it: the empty key for a record with none (the no-key lane).
    pub(super) fn key_of<'a>(&self, record: &'a [u8]) -> std::borrow::Cow<'a, [u8]> {
        self.key
            .as_ref()
            .and_then(|spec| crate::keyed::record_key(spec, record, self.delimiter))
            .unwrap_or_default()
    }

    /// Whom an overload of `record` (its delimiter included) holds back:
    /// its key with `--key` (every start for a record without one).
    pub(super) fn scope_of(&self, record: &[u8]) -> Scope {
        self.key
            .as_ref()
            .and_then(|spec| crate::keyed::record_key(spec, record, self.delimiter))
            .map_or(Scope::All, |key| Scope::Key(key.into()))
    }
}

/// A record as the joblog names it.
pub(super) struct Who<'a> {
    /// Its number (`DRIP_RECORD`).
    pub(super) number: u64,
    /// Its stable id (`DRIP_RECORD_ID`).
    pub(super) id: &'a str,
    /// The record, without its delimiter.
    body: &'a [u8],
    /// The record as a JSON string's text, made once when asked for.
    shown: std::cell::OnceCell<String>,
}

impl<'a> Who<'a> {
    /// Record `number`, of stable id `id`, whose text is `body` (without
    /// its delimiter).
    pub(super) fn new(number: u64, id: &'a str, body: &'a [u8]) -> Who<'a> {
        Who {
            number,
            id,
            body,
            shown: std::cell::OnceCell::new(),
        }
    }

    /// The record as a JSON string's text.
    pub(super) fn shown(&self) -> &str {
        self.shown
            .get_or_init(|| crate::report::spell::json_key(self.body))
    }
}
