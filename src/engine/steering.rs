//! What steers a run and shows it: `drip ctl`'s steering and its
//! control socket, `--schedule`'s follower, the display, and what the
//! reader does to each read.

use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};

use crate::cli::{Config, Input};
use crate::control::server::{Accept, Server};
use crate::input::{Oversize, Splitter};
use crate::jobs::resume::Done;
use crate::progress::Ui;
use crate::reader;
use crate::schedule::{LimitsInForce, Unit};
use crate::shared;
use crate::state::Shared;
use crate::steer::{Follower, Steering};

use super::state::RowShown;

/// The steering of `drip ctl` and `--schedule`.
fn steering(
    config: &Config,
    shared: &Arc<Shared>,
    ui: &Arc<Mutex<Ui>>,
    in_force: LimitsInForce,
    share: Option<(String, shared::Relimiter)>,
) -> Steering {
    Steering::new(
        Arc::clone(shared),
        Arc::clone(ui),
        config.name.clone(),
        in_force,
        share,
    )
    .with_cost(config.cost.clone())
    .with_key_table(config.key.as_ref().map(|k| {
        config.key_table.clone().unwrap_or(crate::cli::RateTable {
            file: None,
            rows: Vec::new(),
            host: k.spec.is_host(),
            jobs: config.jobs.is_some(),
        })
    }))
}

/// The control sockets' directory, made if missing and checked (unless
/// `--no-control`): drip refuses to start when it is not this user's
/// alone.
pub(super) fn control_dir(config: &Config) -> Result<()> {
    if config.control {
        let dir = crate::control::socket_dir();
        crate::control::ensure_dir(&dir).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

/// The control socket for `drip ctl`, unless `--no-control`: bound, and
/// its thread to be started.
pub(super) fn start_control(
    config: &Config,
    steering: Arc<Steering>,
) -> Result<Option<(Server, Accept)>> {
    if !config.control {
        return Ok(None);
    }
    let server = Server::start(config.name.as_deref(), steering)?;
    Ok(Some(server))
}

/// `--schedule`: its row in force now, and the thread that follows it,
/// keeping the row in force in `row` for the report.
fn follow_schedule(
    config: &Config,
    steering: &Arc<Steering>,
    row: Option<RowShown>,
) -> Result<Option<Follower>> {
    let (Some(table), Some(row)) = (&config.schedule, row) else {
        return Ok(None);
    };
    let base = config
        .limits
        .iter()
        .filter(|l| l.unit == Unit::Records)
        .copied()
        .collect();
    let follower = Follower::start(Arc::clone(steering), table.clone(), base, row)
        .context("starting the schedule's thread")?;
    Ok(Some(follower))
}

/// Total size of the inputs when all are regular files, for the ETA.
fn input_size(inputs: &[Input]) -> Option<u64> {
    inputs.iter().try_fold(0u64, |sum, input| match input {
        Input::Path(p) => std::fs::metadata(p)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| sum + m.len()),
        Input::Stdin => None,
    })
}

/// SIGHUP's work with `--key-rates FILE`: the table read again, as `drip
/// ctl … key-rates` reads it.
pub(super) fn reload(steering: &Arc<Steering>) -> crate::monitor::Reload {
    let steering = Arc::clone(steering);
    Arc::new(move || steering.key_rates(None))
}

/// The display (progress, the summary's lines) for `config`.
pub(super) fn ui(config: &Config) -> Arc<Mutex<Ui>> {
    let ui = Ui::new(
        config.progress,
        config.capacity,
        input_size(&config.inputs),
        config.records_per_second(),
        config.jobs.is_some(),
    );
    Arc::new(Mutex::new(
        ui.sized(config.capacity_for.as_ref(), config.capacity_bytes),
    ))
}

/// What the reader does to each read for `config`: `--cost`'s check,
/// `--key host`'s check, and `--resume`'s records done before (read from
/// its joblog now); with `--exec` reading stdin, a file the command was
/// given after the record, to be named.
///
/// # Errors
/// The `--resume` joblog exists but cannot be read.
pub(super) fn screen(config: &Config) -> Result<reader::Screen> {
    let resume = config.jobs.as_ref().and_then(|j| j.resume.as_deref());
    Ok(reader::Screen {
        cost: config.cost.weighs().then(|| config.cost.clone()),
        host: config.key.as_ref().is_some_and(|k| k.spec.is_host()),
        done: resume.map(Done::read).transpose()?,
        delimiter: config.delimiter,
        exec_file: config
            .jobs
            .as_ref()
            .filter(|_| config.inputs.iter().any(|i| matches!(i, Input::Stdin)))
            .and_then(|j| reader::file_after_the_record(&j.command)),
    })
}

/// The splitter for `config`: with `--oversize skip`, oversized records go
/// to the dead letter as they are read, after every record that left
/// before them.
pub(super) fn splitter(config: &Config, shared: &Arc<Shared>) -> Splitter {
    let splitter = Splitter::new(config.delimiter, config.max_record, config.capacity_bytes);
    if config.oversize != Oversize::Skip {
        return splitter;
    }
    let shared = Arc::clone(shared);
    splitter.skipping(Box::new(move |bytes, piece| {
        shared
            .dead_backlog
            .wait_for_room(&|| shared.lock().stop.reading);
        let mut st = shared.lock();
        st.ledger.skip_piece(bytes.len(), piece);
        st.flush_dead();
        st.dead.piece(bytes, piece);
    }))
}

/// The steering of `drip ctl` and `--schedule` for `shared`, given the
/// limits `in_force` (and under `--share`, the NAME's relimiter), and the
/// schedule's follower (keeping its row in force in `row`). The control
/// socket's directory is checked now, its socket made as the monitor
/// starts ([`super::later::Later`]).
///
/// # Errors
/// The directory is not this user's alone, or the follower cannot start.
pub(super) fn steer(
    config: &Config,
    shared: &Arc<Shared>,
    row: Option<RowShown>,
    ui: &Arc<Mutex<Ui>>,
    in_force: LimitsInForce,
    share: Option<&shared::Handle>,
) -> Result<(Arc<Steering>, Option<Follower>)> {
    let relimiter = share
        .zip(config.share.as_ref())
        .map(|(handle, s)| (s.target.name().to_string(), handle.relimiter(s)));
    let steering = Arc::new(steering(config, shared, ui, in_force, relimiter));
    let follower = follow_schedule(config, &steering, row)?;
    control_dir(config)?;
    Ok((steering, follower))
}
