//! The table cache (bounded number of open tables). The block cache is
//! part of the table reader (`sstable::block_cache`), re-exported here.

mod table_cache;

pub use crate::sstable::block_cache::{BlockCache, CacheKey};
pub use table_cache::TableCache;
