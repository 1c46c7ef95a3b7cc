//! Workload generators for Strata's benchmark harness (DESIGN.md §5).
//!
//! * [`gen`]: deterministic record generators — tweets (NEXT, SIGMOD 2025
//!   §6.1; LevelDB++ comparative study, SIGMOD 2018 §5), OSM-like building
//!   rectangles (NEXT §6.1) and synthetic uniform / Zipf attributes
//!   (NEXT §6.5).
//! * [`queries`]: query sets whose mean result count is calibrated against
//!   the generated data, as in NEXT §6.2.1 (query centres sampled from the
//!   data, window size found by bisection).
//! * [`rng`]: SplitMix64 and the samplers built on it (normal, exponential,
//!   Zipf by rejection-inversion, keyed permutations).
//! * [`places`]: the table of real cities the spatial data cluster around.
//! * [`system`]: the interface every benchmarked system implements.
//! * [`trace`]: every benchmark workload as an in-memory [`trace::Trace`]
//!   (load, calibrated query sets, mixed sequences with exact expected
//!   counts), replayed identically by every system.
//! * [`chirp`]: the chirp trace format (parsing and writing lines).
//! * [`results`]: the data model of `results.json`.
//!
//! Everything is a pure function of the seed and the record count: the
//! generators are single-threaded iterators, so the output never depends on
//! thread scheduling.

#![warn(missing_docs)]

pub mod chirp;
pub mod gen;
pub mod perseid;
pub mod places;
pub mod queries;
pub mod results;
pub mod rng;
pub mod system;
pub mod trace;
