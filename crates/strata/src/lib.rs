//! Strata: an embedded LSM-tree key-value engine in which secondary indexes
//! are first-class.
//!
//! A [`Db`] stores records (a primary key and a value, usually a JSON
//! document) in the storage engine of the [`lsm`] crate and keeps secondary
//! indexes over their attributes, each with the strategy that suits its
//! workload ([`StrategyKind`]; NEXT by default). Queries ([`Db::lookup`],
//! [`Db::range`], [`Db::within`]) return exactly the live records whose
//! current attribute matches, newest first. The design is described in
//! `docs/design.md`.

#![warn(missing_docs)]

mod db;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod fuzzing;
mod index;
pub mod inspect;
pub mod load;

pub use db::{Db, Extractors, IndexCheck, DEFAULT_BUILD_SHARE};
pub use index::{
    BuildProgress, Extractor, ExtractorFn, Hit, HitIter, HitRef, Hits, IndexInfo, IndexSpec,
    IndexState, IndexStats, IndexValue, KeyType, PageCacheStats, Predicate, QueryOptions,
    QueryProfile, StrategyKind, PARALLEL_MIN_BLOCKS, PARALLEL_MIN_RECORDS,
};
pub use strata_lsm::{
    BlockEntry, CompactionStyle, Compression, DbIterator, Error, IoStats, MergeOperator, Options,
    Result, Snapshot, Stats, Versioned, WalRecovery, WriteBatch, WriteOptions,
};

/// The storage engine under Strata (WAL, memtable, tables, versions,
/// compaction, extension hooks), for advanced use.
pub use strata_lsm as lsm;

/// Attribute extraction exactly as indexes do it, for tools that check an
/// index against a scan.
pub mod attr {
    pub use crate::index::value::{extract, parse_path, Skip};
}

/// The README's examples, compiled as doctests so they stay correct.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
