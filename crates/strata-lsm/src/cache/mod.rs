//! Caches: the sharded block cache (byte budget, LRU) and the table cache
//! (bounded number of open tables).

mod block_cache;
mod table_cache;

pub use block_cache::{BlockCache, CacheKey};
pub use table_cache::TableCache;
