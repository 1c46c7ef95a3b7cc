//! Sorted string tables: immutable files of sorted internal entries.
//!
//! Layout and checksums are specified in `docs/format/sstable.md`.
//! `builder` writes a table (calling [`crate::hooks::TableObserver`]s),
//! `table` reads one, `block` is the prefix-compressed block with restart
//! points, `filter` the cache-line-blocked Bloom filter on user keys,
//! `format` the block handle, trailer and footer, `obsolete` the
//! immutable bitmaps of entries readers skip.

pub mod block;
pub mod block_cache;
pub mod builder;
pub mod filter;
pub mod format;
pub mod observer;
pub mod obsolete;
pub mod table;

pub use builder::{BuiltTable, TableBuildOptions, TableBuilder};
pub use format::{BlockHandle, Compression};
pub use table::{
    Found, LookupCounts, MetaBlock, MetaBlockId, Table, TableIter, TableProperties,
    TableReadOptions,
};
