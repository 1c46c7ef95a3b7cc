//! The storage engine under Strata: a LevelDB-style LSM tree that knows
//! nothing of JSON, attributes or index strategies.
//!
//! Writes go to the write-ahead log ([`wal`]) and the [`memtable`], which is
//! flushed to an immutable [`sstable`]; the MANIFEST ([`version`]) records
//! which tables are live at which level; [`compaction`] merges tables in the
//! background. Extensions (Strata's secondary-index framework) observe
//! batches, memtables, tables, compactions and version installs through
//! [`hooks`]. Layers depend downward only: `coding`/`key`/`error`/`mem` →
//! `wal`/`memtable`/`sstable`/`cache` → `iter`/`merge` → `version` →
//! `compaction` → `host` → `hooks` → `db`.

#![warn(missing_docs)]

pub mod batch;
pub mod cache;
pub mod coding;
pub mod compaction;
mod db;
pub mod error;
pub mod filename;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod hooks;
pub mod host;
pub mod io;
pub mod iter;
pub mod key;
pub mod locate;
pub mod mem;
pub mod memtable;
pub mod merge;
pub mod options;
pub mod read;
pub mod sstable;
pub mod stats;
pub mod sync;
#[cfg(test)]
mod test_data;
pub mod version;
pub mod wal;

pub use batch::WriteBatch;
pub use db::iter::DbIterator;
pub use db::{BlockEntry, Db, Snapshot, Versioned};
pub use error::{Error, Result};
pub use locate::BlockLocation;
pub use merge::MergeOperator;
pub use options::{CompactionStyle, Compression, Options, WalRecovery, WriteOptions};
pub use stats::{IoStats, Stats};
