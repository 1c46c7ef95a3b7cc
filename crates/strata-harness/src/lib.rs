//! Strata's benchmark harness as a library (the `strata` command is a thin
//! command-line layer over it).
//!
//! * [`run`]: `bench run`, `bench replay` and `bench trace`: a workload
//!   (a [`strata_bench::trace::Trace`]) replayed identically on every
//!   system, result counts checked, `results.json` and the report written.
//! * [`registry`]: from a system name to an open
//!   [`BenchSystem`](strata_bench::system::BenchSystem): Strata
//!   ([`strata_system`]) beside the peers of `strata-compare` (features
//!   `peers` and `rocksdb`).
//! * [`names`]: the one grammar and parser of system names
//!   (`strata:next[delta=off]@user_id`, aliases).
//! * [`report`]: the stdout tables, `report.md` and its PNG plots (drawn
//!   by the crate-private `plot` module).
//! * [`load`]: bulk loading of JSONL and CSV files (with progress bars on
//!   stderr, from the [`progress`] module, which `strata index create`
//!   uses too).
//! * [`dataset`]: `strata gen`, a generated data set written as JSONL
//!   with its calibrated query sets.
//! * [`db_bench`]: the db_bench-style engine benchmark.
//! * [`concurrent`]: `stress --threads`, concurrent writers and readers
//!   checking every index answer against a scan of its snapshot.
//! * [`stress`] and [`verify`]: the deterministic crash-test workload and
//!   the check of a recovered database against its acknowledged output.

#![warn(missing_docs)]

pub mod concurrent;
pub mod dataset;
pub mod db_bench;
pub mod error;
pub mod load;
pub mod names;
mod plot;
pub mod progress;
pub mod registry;
pub mod report;
pub mod run;
pub mod strata_system;
pub mod stress;
pub mod verify;

pub use error::{Error, Result};
