//! `--share-jobs N`: a job starts only with a lease of the limit shared by
//! every drip on the NAME ([`crate::shared::jobs`]), given back as its
//! record ends.

use std::sync::Arc;

use super::Hook;
use crate::jobs::parts::PoolParts;
use crate::jobs::JobConfig;
use crate::report::Section;
use crate::shared::jobs::SharedJobs;

/// The job leases shared with the other drips.
pub(in crate::jobs) struct ShareJobs(Arc<SharedJobs>);

impl ShareJobs {
    /// The shared job limit, with `--share-jobs`.
    ///
    /// # Errors
    /// The shared state cannot be opened.
    pub(in crate::jobs) fn of(cfg: &JobConfig) -> anyhow::Result<Option<ShareJobs>> {
        let Some((target, n)) = &cfg.share_jobs else {
            return Ok(None);
        };
        Ok(Some(ShareJobs(SharedJobs::open(target, *n, cfg.quiet)?)))
    }
}

impl Hook for ShareJobs {
    /// Take a lease, waiting while the fleet runs N jobs.
    fn acquire(&self, pool: &PoolParts, stop: &dyn Fn() -> bool) -> bool {
        self.0.acquire(&|| stop() || pool.stopping())
    }

    fn release(&self) {
        self.0.release();
    }

    /// A job's process holds a lease of the fleet's: it is noted to the
    /// warden before its program runs, so none outlives drip unnoted.
    fn notes_itself(&self) -> bool {
        true
    }

    /// Its lease goes back first (a call to the shared state).
    fn ended(&self, _pool: &PoolParts, _number: u64) {
        self.0.release();
    }

    fn close(&self) {
        self.0.close();
    }

    fn section(&self) -> Option<Arc<dyn Section>> {
        Some(Arc::new(self.0.figures()))
    }
}
