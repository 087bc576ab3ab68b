//! The one choice between the two backends of a NAME: the state file on
//! this host ([`FileStore`]) or Redis ([`RedisStore`]). Every shared
//! feature (the global limits, the limits per key, `drip take`, the
//! budgets' counts, the job leases) opens its [`Store`] here and speaks
//! to it through the operations of [`super::protocol`] alone.

use super::file::{state_dir, FileStore};
use std::sync::Arc;

use super::gcra::Meter;
use super::protocol::Store;
use super::redis::RedisStore;
use super::target::Target;
use crate::keyed::KeyTable;

/// The backend of `target` for limits `spec` (all of them): the global
/// limits' `meters` and the limits per key `keys` (none, and an empty
/// spec, for the features that keep no schedule: a budget's count, the
/// job leases).
///
/// # Errors
/// A Redis URL redis-rs does not accept.
pub fn open(
    target: &Target,
    spec: &str,
    meters: Vec<Meter>,
    keys: Option<Arc<KeyTable>>,
) -> Result<Box<dyn Store>, String> {
    Ok(match target {
        Target::Host(name) => Box::new(FileStore::new(
            &state_dir(),
            name,
            spec.to_string(),
            meters,
            keys,
        )),
        Target::Redis { url, name } => {
            Box::new(RedisStore::new(url, name, spec.to_string(), meters, keys)?)
        }
    })
}
