//! Sharded LRU cache of decoded blocks.
//!
//! Keys are spread over [`NUM_SHARDS`] shards by a hash of the key; each
//! shard is a mutex around an LRU with its own byte budget (the capacity
//! divided evenly, rounded up), so threads touching different shards do not
//! contend. Recency is a tick counter: a `BTreeMap` from tick to key orders
//! entries from least to most recently used.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sstable::block::Block;

/// Number of independently locked shards.
pub const NUM_SHARDS: usize = 16;

/// Identifies a block: table file number and block offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Table file number.
    pub file_number: u64,
    /// Offset of the block in the file.
    pub offset: u64,
}

impl CacheKey {
    fn shard(&self) -> usize {
        let mut h = self
            .file_number
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(self.offset);
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        (h % NUM_SHARDS as u64) as usize
    }
}

/// One shard. Invariants: `map` and `lru` hold the same keys; `usage` is
/// the sum of the charges in `map` and never exceeds `capacity` after an
/// operation returns.
struct Shard {
    capacity: usize,
    usage: usize,
    tick: u64,
    map: HashMap<CacheKey, (Arc<Block>, u64)>,
    lru: BTreeMap<u64, CacheKey>,
}

impl Shard {
    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    fn get(&mut self, key: &CacheKey) -> Option<Arc<Block>> {
        let t = self.next_tick();
        let (block, tick) = self.map.get_mut(key)?;
        self.lru.remove(tick);
        *tick = t;
        self.lru.insert(t, *key);
        Some(Arc::clone(block))
    }

    fn remove(&mut self, key: &CacheKey) {
        if let Some((block, tick)) = self.map.remove(key) {
            self.lru.remove(&tick);
            self.usage -= block.size();
        }
    }

    fn insert(&mut self, key: CacheKey, block: Arc<Block>) {
        self.remove(&key);
        let charge = block.size();
        if charge > self.capacity {
            return;
        }
        while self.usage + charge > self.capacity {
            let Some((_, victim)) = self.lru.pop_first() else {
                break;
            };
            if let Some((b, _)) = self.map.remove(&victim) {
                self.usage -= b.size();
            }
        }
        let t = self.next_tick();
        self.usage += charge;
        self.map.insert(key, (block, t));
        self.lru.insert(t, key);
    }
}

/// Sharded LRU cache of decoded blocks, charged by block size.
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl BlockCache {
    /// A cache holding at most about `capacity_bytes` of block contents, split
    /// over [`NUM_SHARDS`] shards evicted least-recently-used first.
    pub fn new(capacity_bytes: usize) -> BlockCache {
        let per_shard = capacity_bytes.div_ceil(NUM_SHARDS);
        let shards = (0..NUM_SHARDS)
            .map(|_| {
                Mutex::new(Shard {
                    capacity: per_shard,
                    usage: 0,
                    tick: 0,
                    map: HashMap::new(),
                    lru: BTreeMap::new(),
                })
            })
            .collect();
        BlockCache {
            shards,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn shard(&self, key: &CacheKey) -> MutexGuard<'_, Shard> {
        // A panic while holding the lock cannot break the shard's
        // invariants mid-way in a way that matters for a cache; keep going.
        crate::sync::lock(&self.shards[key.shard()])
    }

    /// The cached block, marking it recently used; counts a hit or a miss.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Block>> {
        let r = self.shard(key).get(key);
        let c = if r.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        r
    }

    /// Caches `block` under `key`, evicting older blocks of its shard to stay
    /// within the shard's budget.
    pub fn insert(&self, key: CacheKey, block: Arc<Block>) {
        self.shard(&key).insert(key, block)
    }

    /// Drops one block if present.
    pub fn erase(&self, key: &CacheKey) {
        self.shard(key).remove(key)
    }

    /// Bytes currently charged.
    pub fn usage(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| crate::sync::lock(s).usage as u64)
            .sum()
    }

    /// Budget in bytes (the sum of the shards' budgets).
    pub fn capacity(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| crate::sync::lock(s).capacity as u64)
            .sum()
    }

    /// Lookups that found a block / found none, since creation.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sstable::block::BlockBuilder;

    fn block(payload: usize) -> Arc<Block> {
        let mut b = BlockBuilder::new(16);
        b.add(b"k", &vec![7u8; payload]);
        Arc::new(Block::new(b.finish().to_vec()).unwrap())
    }

    #[test]
    fn lru_respects_byte_budget_and_recency() {
        let cache = BlockCache::new(16 * 1000);
        let b = block(200);
        let charge = b.size();
        // Many blocks in one file: usage never exceeds the budget.
        for off in 0..2000u64 {
            cache.insert(
                CacheKey {
                    file_number: 1,
                    offset: off,
                },
                Arc::clone(&b),
            );
            assert!(cache.usage() <= 16 * 1000);
        }
        assert!(cache.usage() > 0);
        assert_eq!(cache.usage() % charge as u64, 0);

        // Within one shard: the least recently used block goes first.
        let mut shard = Shard {
            capacity: 3 * charge,
            usage: 0,
            tick: 0,
            map: HashMap::new(),
            lru: BTreeMap::new(),
        };
        let k = |o| CacheKey {
            file_number: 9,
            offset: o,
        };
        shard.insert(k(1), Arc::clone(&b));
        shard.insert(k(2), Arc::clone(&b));
        shard.insert(k(3), Arc::clone(&b));
        assert!(shard.get(&k(1)).is_some()); // 2 is now the oldest
        shard.insert(k(4), Arc::clone(&b));
        assert!(shard.get(&k(2)).is_none());
        assert!(shard.get(&k(1)).is_some());
        assert!(shard.get(&k(3)).is_some());
        assert!(shard.get(&k(4)).is_some());
        assert_eq!(shard.usage, 3 * charge);
        // Re-inserting a key replaces it without double charging.
        shard.insert(k(4), Arc::clone(&b));
        assert_eq!(shard.usage, 3 * charge);
        assert_eq!(shard.map.len(), shard.lru.len());
        // A block larger than the shard is not cached.
        shard.insert(k(5), block(10 * charge));
        assert!(shard.get(&k(5)).is_none());
        assert_eq!(shard.usage, 3 * charge);
    }

    #[test]
    fn hits_misses_and_zero_capacity() {
        let cache = BlockCache::new(1 << 20);
        let key = CacheKey {
            file_number: 3,
            offset: 0,
        };
        assert!(cache.get(&key).is_none());
        cache.insert(key, block(10));
        assert!(cache.get(&key).is_some());
        assert_eq!(cache.hits_and_misses(), (1, 1));
        cache.erase(&key);
        assert!(cache.get(&key).is_none());
        assert_eq!(cache.usage(), 0);

        let none = BlockCache::new(0);
        none.insert(key, block(10));
        assert!(none.get(&key).is_none());
        assert_eq!(none.usage(), 0);
    }
}
