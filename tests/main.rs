//! drip's integration tests, one binary: each file of `tests/` is a module
//! here, so the tests of every file share one pool of test threads (cargo
//! runs test binaries one after another, and most of these tests wait on
//! real time, not on the CPU). `common`, `fleet` and `topology` are the
//! helpers the files share.
//!
//! Run one file's tests with `cargo test --test suite FILE::`, one test
//! with `cargo test --test suite FILE::NAME`.

mod common;
mod fleet;
mod topology;

mod accounting;
mod admission;
mod budget;
mod cli;
mod clients;
mod control;
mod costs;
mod docs;
mod generated;
mod host_key;
mod inputs;
mod jobs;
mod jobs_headers;
mod jobs_leaving;
mod jobs_overload;
mod jobs_records;
mod jobs_summary;
mod keep_order;
mod key_hosts;
mod key_jobs;
mod key_rates;
mod keyed;
mod keyed_cli;
mod keyed_clients;
mod keyed_shared;
mod layers;
mod llm_api;
mod metrics;
mod platform;
mod properties;
mod races;
mod ratelimit_headers;
mod recipes;
mod resume;
mod service_level;
mod share;
mod share_budget_topologies;
mod share_ctl;
mod share_jobs;
mod share_sentinel;
mod share_settle;
mod share_start;
mod side_channels;
mod signals;
mod take;
mod terminal;
mod timed;
mod transitions;
