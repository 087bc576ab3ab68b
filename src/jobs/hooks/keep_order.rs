//! `--keep-order`: a record starts only inside the window
//! ([`crate::jobs::order`]), its attempts' output is held, and goes to
//! stdout in input order as its record ends.

use super::Hook;
use crate::jobs::attempt::{Files, Unwritten};
use crate::jobs::order::{HeldOutput, Order};
use crate::jobs::parts::PoolParts;
use crate::jobs::JobConfig;

/// The outputs held until their turn.
pub(in crate::jobs) struct KeepOrder(Order);

impl KeepOrder {
    /// The window of `--keep-order`, when given.
    pub(in crate::jobs) fn of(cfg: &JobConfig) -> Option<KeepOrder> {
        cfg.keep_order.map(|window| KeepOrder(Order::new(window)))
    }
}

impl Hook for KeepOrder {
    fn admits(&self, number: u64) -> bool {
        self.0.admits(number)
    }

    fn holds_output(&self) -> bool {
        true
    }

    /// The output is held until the record's turn.
    fn pass_on(&self, pool: &PoolParts, number: u64, files: &mut Files) -> bool {
        let mut held = HeldOutput::default();
        pool.passing(|give_up| files.pass_on(&mut held, pool.records.delimiter, give_up));
        if let Err(e) = self.0.hold(number, held) {
            eprintln!("drip: --keep-order: holding a job's output: {e}");
        }
        true
    }

    /// Its output goes out, while its job still counts as running: drip
    /// waits for running jobs before it exits.
    fn ended(&self, pool: &PoolParts, number: u64) {
        pool.passing(|give_up| self.0.done(number, &pool.out, give_up));
    }

    fn abandon(&self) -> Unwritten {
        self.0.flush_all()
    }
}
