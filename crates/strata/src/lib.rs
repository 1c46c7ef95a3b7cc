//! Strata: an embedded LSM-tree key-value engine in which secondary indexes
//! are first-class.
//!
//! The engine follows LevelDB's architecture and vocabulary: writes go to the
//! write-ahead log ([`wal`]) and the [`memtable`], which is flushed to an
//! immutable [`sstable`]; the MANIFEST ([`version`]) records which tables are
//! live at which level; [`compaction`] merges tables in the background.
//! Extensions (the secondary-index strategies) observe tables, compactions
//! and version installs through [`hooks`].

pub mod batch;
pub mod cache;
pub mod coding;
pub mod compaction;
mod db;
pub use db::{BlockEntry, Db, IndexCheck, Snapshot, Versioned};
pub use index::{
    Extractor, Hit, IndexInfo, IndexSpec, IndexState, IndexStats, IndexValue, KeyType, Predicate,
    QueryOptions, QueryProfile,
};
pub use iter::db_iter::DbIterator;
pub mod error;
pub mod filename;
pub mod hooks;
pub mod index;
pub mod io;
pub mod iter;
pub mod key;
pub mod memtable;
pub mod merge;
pub mod options;
pub mod sstable;
pub mod stats;
pub mod version;
pub mod wal;

pub use batch::WriteBatch;
pub use error::{Error, Result};
pub use merge::MergeOperator;
pub use options::{Compression, Options, WalRecovery, WriteOptions};
pub use stats::{IoStats, Stats};

/// The README's examples, compiled as doctests so they stay correct.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
