//! A response's quotas, followed (unless `--no-quota-pacing`; and the
//! token costs of `--cost`'s budgets): the starts are paced so the requests'
//! quota and each token budget's a server announces
//! ([`crate::jobs::quota`]) last until their reset, for every start or one
//! key's ([`Scope`]); a start spends its record's tokens from the windows,
//! or waits for their reset (of a bucket, for its refill; the requests'
//! bucket is a budget each start spends 1 of, [`quota::REQUESTS`]). The
//! books are the gate's ([`crate::jobs::gate`]); the waits sleep on the
//! pool's slots.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use super::{AttemptStart, Heard, Hook};
use crate::jobs::gate::Scope;
use crate::jobs::parts::{ns, PoolParts};
use crate::jobs::quota::{self, CostBudgets};
use crate::jobs::slots::{ReadWhile, SlotTable, Slots};
use crate::jobs::{JobConfig, JobFate};

/// The quotas followed, and the costs the starts spend of them.
pub(in crate::jobs) struct Quotas {
    /// The cost budgets the token quotas a server announces pace.
    budgets: CostBudgets,
    /// The starts are paced from the quotas announced in the headers file
    /// (not with `--no-quota-pacing`).
    pacing: bool,
    /// `-q`: nothing said on stderr.
    quiet: bool,
    /// A malformed quota field was said on stderr.
    malformed_said: AtomicBool,
}

impl Quotas {
    /// The quotas followed (unless `--no-quota-pacing`), or the token
    /// windows the cost `budgets` are spent from (none without either).
    pub(in crate::jobs) fn of(cfg: &JobConfig, budgets: &CostBudgets) -> Option<Quotas> {
        (cfg.quota_pacing || !budgets.is_empty()).then(|| Quotas {
            budgets: budgets.clone(),
            pacing: cfg.quota_pacing,
            quiet: cfg.quiet,
            malformed_said: AtomicBool::new(false),
        })
    }
}

impl Hook for Quotas {
    /// The attempt spends its record's tokens ([`Quotas::spend_tokens`]).
    fn before_attempt(&self, pool: &PoolParts, start: &AttemptStart) -> Result<(), JobFate> {
        self.spend_tokens(pool, start)
    }

    /// The quotas its headers announce are followed, unless a
    /// `Retry-After` said to pause (the overload's pause holds starts).
    fn answered(&self, pool: &PoolParts, answer: &Heard) {
        match (answer.headers, answer.retry_after) {
            (Some(text), false) => self.follow_quota(pool, text, answer.scope, answer.number),
            _ => {
                self.response_read(pool, answer.number, answer.scope);
            }
        }
    }
}

impl Quotas {
    /// Pace the starts so the quotas announced in a response's headers
    /// (`text`) last until their reset, for the record's `scope` (its
    /// key's quota with `--key`): the requests' ([`Quotas::follow_requests`];
    /// read as a bucket, as a budget each request costs 1 of,
    /// [`quota::REQUESTS`]), and each token budget's
    /// ([`Quotas::follow_tokens`]); `number` is the
    /// record answered. A malformed quota field is ignored, and said once
    /// on stderr (unless `-q`).
    fn follow_quota(&self, pool: &PoolParts, text: &str, scope: &Scope, number: u64) {
        if !self.pacing {
            return;
        }
        let read_while = self.response_read(pool, number, scope);
        let announced = quota::parse_quotas(text, SystemTime::now());
        if let Some(field) = announced.malformed {
            if !self.malformed_said.swap(true, Ordering::Relaxed) && !self.quiet {
                eprintln!("drip: {field}: not a quota drip can read; such fields are ignored");
            }
        }
        for family in announced.tokens {
            let Some(budget) = self.budgets.paced_by(family.budget) else {
                continue;
            };
            let read =
                quota::TokensRead::of(family.said, read_while.tokens(budget), read_while.since);
            self.follow_tokens(pool, scope, number, budget, read);
        }
        match announced.requests {
            // A bucket: a budget each request costs 1 of, spent as tokens.
            Some(said) if said.is_bucket() => {
                pool.gate.set_quota_spacing(scope, 0);
                let read = quota::TokensRead::of(said, read_while.responses, read_while.since);
                self.follow_tokens(pool, scope, number, quota::REQUESTS, read);
            }
            Some(said) => {
                pool.gate.forget_tokens(scope, quota::REQUESTS);
                self.follow_requests(pool, said.quota, scope, read_while.responses);
            }
            None => {}
        }
    }

    /// The response to record `number` (of `scope`) is read: what was read
    /// while its attempt ran, and the requests of the scope in flight now
    /// count it as read while they were.
    fn response_read(&self, pool: &PoolParts, number: u64, scope: &Scope) -> ReadWhile {
        let mut table = pool.slots.lock();
        let Some(job) = table.running.get_mut(&number) else {
            return ReadWhile::default();
        };
        let costs = self.budgets.costs(job.record.as_bytes());
        let read = std::mem::take(&mut job.read_while);
        for job in table.running.values_mut() {
            if job.read_while.in_flight && self.in_scope(pool, job.record.as_bytes(), scope) {
                job.read_while.add(&costs);
            }
        }
        read
    }

    /// Whether `record` is of `scope` (every record is of every start's).
    fn in_scope(&self, pool: &PoolParts, record: &[u8], scope: &Scope) -> bool {
        *scope == Scope::All || pool.records.scope_of(record) == *scope
    }

    /// The token quota of a `budget` announced by the response to record
    /// `number` (`read`, with what was read while its attempt ran): kept
    /// in the scope's window, the tokens of the other requests of the
    /// scope in flight counted against it, for the starts to spend
    /// ([`Quotas::spend_tokens`]).
    fn follow_tokens(
        &self,
        pool: &PoolParts,
        scope: &Scope,
        number: u64,
        budget: &str,
        read: quota::TokensRead,
    ) {
        // Under the slots' lock, as a start's spending is
        // ([`Quotas::spend_tokens`]): no start falls between what is counted
        // in flight and what the window keeps.
        let table = pool.slots.lock();
        let in_flight = self.tokens_in_flight(pool, &table, scope, budget, Some(number));
        let cost = table
            .running
            .get(&number)
            .map_or(0, |job| self.budgets.cost(budget, job.record.as_bytes()));
        let now = pool.shared.clock.now();
        let read = quota::TokensRead {
            in_flight,
            cost,
            ..read
        };
        pool.gate.observe_tokens(scope, budget, now, read);
        drop(table);
        pool.slots.wake();
    }

    /// A `start` of record `number` (`record`, its `scope`) spends its cost
    /// on each budget (and 1 on the requests' bucket, [`quota::REQUESTS`],
    /// when one is read): when an announced token window has less left, it
    /// waits for the window's reset (the scope pauses until then, so the
    /// records behind it wait in the bucket), and spends it then; past a
    /// reset, while the new window is only assumed, it waits for a
    /// response telling of it ([`quota::Tokens`]). Its request is in
    /// flight from then on ([`Slots::ask`]). `Err` with
    /// the record's fate at a stop (undelivered) or past its `deadline`
    /// (expired).
    fn spend_tokens(&self, pool: &PoolParts, start: &AttemptStart) -> Result<(), JobFate> {
        let AttemptStart {
            number,
            record,
            deadline,
            scope,
        } = *start;
        let costs = self.budgets.costs(record);
        loop {
            let seen = pool.slots.epoch();
            let now = pool.shared.clock.now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(JobFate::Expired);
            }
            let mut table = pool.slots.lock();
            // The requests' bucket, when one is read ([`quota::REQUESTS`]):
            // its requests in flight are counted only then.
            let requests = pool.gate.reads_tokens(scope, quota::REQUESTS);
            let spends: Vec<quota::Spend> = costs
                .iter()
                .chain(requests.then_some(&(quota::REQUESTS, 1)))
                .map(|&(budget, cost)| quota::Spend {
                    budget,
                    cost,
                    in_flight: self.tokens_in_flight(pool, &table, scope, budget, None),
                })
                .collect();
            let until = match pool.gate.spend_tokens(scope, now, &spends) {
                Ok(()) => {
                    Slots::ask(&mut table, number, now);
                    return Ok(());
                }
                Err(hold) => hold.until(),
            };
            drop(table);
            pool.shared.data_ready.notify_all();
            if pool.stopping() {
                return Err(JobFate::Undelivered);
            }
            let wake = deadline.map_or(until, |d| d.min(until));
            pool.slots.wait_since(seen, Some(wake.saturating_sub(now)));
        }
    }

    /// The tokens of `budget` the requests of `scope` in flight cost (but
    /// record `except`'s), as `table` has them.
    fn tokens_in_flight(
        &self,
        pool: &PoolParts,
        table: &SlotTable,
        scope: &Scope,
        budget: &str,
        except: Option<u64>,
    ) -> u64 {
        table
            .running
            .iter()
            .filter(|(n, job)| {
                Some(**n) != except
                    && job.read_while.in_flight
                    && self.in_scope(pool, job.record.as_bytes(), scope)
            })
            .map(|(_, job)| self.budgets.cost(budget, job.record.as_bytes()))
            .fold(0, u64::saturating_add)
    }

    /// Pace the starts so the requests' quota `q` lasts until its reset,
    /// the requests in flight counted against it ([`quota::pace`]), and
    /// what it says remains lowered by the `read_while` responses read
    /// while its request was in flight. A stale response
    /// ([`quota::Window`]) leaves the pace as it is.
    fn follow_requests(&self, pool: &PoolParts, q: quota::Quota, scope: &Scope, read_while: u64) {
        let now = pool.shared.clock.now();
        let Some(q) = pool.gate.observe_quota(scope, now, q, read_while) else {
            return;
        };
        let in_flight = self.in_flight(pool, scope);
        match quota::pace(q, in_flight) {
            quota::QuotaPace::Every(d) => pool.gate.set_quota_spacing(scope, ns(d)),
            quota::QuotaPace::Pause(d) => {
                pool.gate.set_quota_spacing(scope, 0);
                pool.gate.pause(scope, now, now.saturating_add(ns(d)));
                pool.shared.data_ready.notify_all();
            }
        }
        pool.slots.wake();
    }

    /// The requests of `scope` in flight: their process started, and
    /// their response is not read yet (a record waiting for its start
    /// spends what remains when it starts, not before).
    fn in_flight(&self, pool: &PoolParts, scope: &Scope) -> u64 {
        let table = pool.slots.lock();
        table
            .running
            .values()
            .filter(|job| {
                job.read_while.in_flight && self.in_scope(pool, job.record.as_bytes(), scope)
            })
            .count() as u64
    }
}
