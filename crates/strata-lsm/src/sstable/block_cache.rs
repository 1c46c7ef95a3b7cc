//! Sharded, scan-resistant cache of decoded blocks (segmented LRU).
//!
//! Keys are spread over [`NUM_SHARDS`] shards by a hash of the key; each
//! shard is a mutex around its own byte budget (the capacity divided evenly,
//! rounded up), so threads touching different shards do not contend.
//!
//! Policy (segmented LRU, two segments per shard):
//!
//! - a block inserted after a miss enters the *probation* segment at its
//!   most recently used end;
//! - a hit on a probation block promotes it to the *protected* segment;
//!   a hit on a protected block moves it to the protected MRU end;
//! - the protected segment holds at most [`PROTECTED_PERCENT`]% of the
//!   shard budget: promotion beyond that demotes protected LRU blocks back
//!   to the probation MRU end (they are not dropped);
//! - eviction takes the probation LRU block first and touches the protected
//!   segment only when probation is empty.
//!
//! So a query that reads many blocks once (a scan) cycles only through
//! probation: blocks hit at least twice stay in the protected segment,
//! whatever the length of the scan.
//!
//! Admission (optional, [`BlockCache::with_doorkeeper`]): a block missed for
//! the first time is not cached; its fingerprint goes into a direct-mapped
//! *doorkeeper* array (TinyLFU's doorkeeper, Einziger et al. 2017) of about
//! twice the shard's capacity in 4 KiB blocks, and a second miss while the
//! fingerprint is still there admits it. Blocks read once — every block of
//! a large query, most blocks of random point reads on data larger than the
//! cache — then never displace cached blocks nor cost an insert and an
//! eviction (measured at 2 M tweets: a quarter of a large NEXT query's time
//! went to filling the cache with blocks never read again).
//!
//! Priority ([`Priority::High`], the strategies' meta blocks, which index
//! data blocks and are read by many queries): admitted on the first miss
//! and inserted at the protected MRU end. On the LevelDB++ mix at 1 M
//! tweets this halved NEXT's secondary-block reads from disk (18.2 k to
//! 8.5 k) and left data-block hits unchanged.
//!
//! Every operation is O(1): entries live in a slab (`Vec<Node>`) linked into
//! two intrusive doubly linked lists by slab index, and the key index is a
//! hash map with a multiplicative hasher for the two-`u64` key (no SipHash).
//!
//! Counters (hits, misses, inserts, evictions, erasures) are exact and
//! maintained under the shard lock; see [`BlockCacheStats`] for the
//! identities they satisfy.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::sstable::block::Block;

/// Number of independently locked shards.
pub const NUM_SHARDS: usize = 16;

/// Share of a shard's budget the protected segment may hold, in percent.
pub const PROTECTED_PERCENT: usize = 80;

/// Identifies a block: table file number and block offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    /// Table file number.
    pub file_number: u64,
    /// Offset of the block in the file.
    pub offset: u64,
}

/// Mixes the two halves of a key into 64 well-distributed bits (the
/// multiply-xorshift finalizer of MurmurHash3 over a multiplicative
/// combination). `seed` separates the shard choice from the in-shard hash,
/// so keys of one shard still spread over all buckets of its map.
fn mix(file_number: u64, offset: u64, seed: u64) -> u64 {
    let mut h = (file_number ^ seed)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(offset);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

impl CacheKey {
    fn shard(&self) -> usize {
        (mix(self.file_number, self.offset, 0) % NUM_SHARDS as u64) as usize
    }
}

/// Hasher for [`CacheKey`]: collects the two `u64` halves written by the
/// derived `Hash` and mixes them once in `finish`. Other inputs (never
/// written by `CacheKey`) are folded in byte by byte.
#[derive(Default)]
pub struct KeyHasher {
    words: [u64; 2],
    n: usize,
}

impl Hasher for KeyHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, x: u64) {
        let i = self.n % 2;
        if let Some(w) = self.words.get_mut(i) {
            *w = w.rotate_left(5) ^ x;
        }
        self.n += 1;
    }

    fn finish(&self) -> u64 {
        let [a, b] = self.words;
        mix(a, b, 0x5bd1_e995_2545_f491)
    }
}

type KeyMap<V> = HashMap<CacheKey, V, BuildHasherDefault<KeyHasher>>;

thread_local! {
    /// [`BlockCache::insert`]'s evicted blocks, dropped after the shard
    /// lock is released; empty between calls.
    static EVICTED: Cell<Vec<Arc<Block>>> = const { Cell::new(Vec::new()) };
}

/// Seed of the doorkeeper's fingerprints (distinct from the shard and map
/// hashes).
const GHOST_SEED: u64 = 0x2d35_8dcc_aa6c_78a5;

/// Slab index meaning "no node".
const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Segment {
    Probation,
    Protected,
}

struct Node {
    key: CacheKey,
    /// `None` only while the slot is on the free list.
    block: Option<Arc<Block>>,
    charge: usize,
    segment: Segment,
    prev: u32,
    next: u32,
}

/// A doubly linked list threaded through the slab: `head` is the least
/// recently used end, `tail` the most recently used one.
#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
    bytes: usize,
}

impl List {
    const EMPTY: List = List {
        head: NIL,
        tail: NIL,
        bytes: 0,
    };
}

/// Counters of one shard, exact (updated under the shard lock).
#[derive(Default, Clone, Copy)]
struct ShardCounters {
    hits: u64,
    misses: u64,
    inserts: u64,
    evictions: u64,
    erasures: u64,
    rejected: u64,
    promotions: u64,
    declined: u64,
}

/// One shard. Invariants: every occupied slab slot is in `map` and in
/// exactly one of the two lists (the one its `segment` names); each list's
/// `bytes` is the sum of its nodes' charges; `probation.bytes +
/// protected.bytes <= capacity` after every operation;
/// `protected.bytes <= protected_cap` after every operation.
struct Shard {
    capacity: usize,
    protected_cap: usize,
    map: KeyMap<u32>,
    nodes: Vec<Node>,
    free: Vec<u32>,
    probation: List,
    protected: List,
    counters: ShardCounters,
    /// Doorkeeper: fingerprints (never 0) of blocks missed once and not
    /// cached, direct-mapped (a slot keeps the last fingerprint hashed to
    /// it; 0 is empty). Empty: every missed block is admitted. Its length
    /// is 0 or a power of two.
    ghosts: Vec<u64>,
}

/// How a block competes for the cache.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Priority {
    /// Data blocks: admitted by the doorkeeper (if any), inserted into
    /// probation.
    Low,
    /// Blocks that index other blocks (the strategies' meta blocks: few,
    /// small, each read by many queries): admitted on their first miss and
    /// inserted at the protected MRU end, so that a stream of data blocks
    /// read once does not evict them (RocksDB's high-priority pool for
    /// index and filter blocks plays the same part).
    High,
}

/// What a lookup found.
pub enum Lookup {
    /// The cached block.
    Hit(Arc<Block>),
    /// Not cached; `admit` says whether the caller should insert the block
    /// once read (false: the doorkeeper saw its first miss).
    Miss {
        /// Insert the block after reading it.
        admit: bool,
    },
}

impl Shard {
    fn new(capacity: usize) -> Shard {
        Shard {
            capacity,
            protected_cap: capacity / 100 * PROTECTED_PERCENT
                + capacity % 100 * PROTECTED_PERCENT / 100,
            map: KeyMap::default(),
            nodes: Vec::new(),
            free: Vec::new(),
            probation: List::EMPTY,
            protected: List::EMPTY,
            counters: ShardCounters::default(),
            ghosts: Vec::new(),
        }
    }

    /// Whether a block missed now may enter the cache: always without a
    /// doorkeeper; with one, if its fingerprint is in its slot (a miss
    /// before, not overwritten since; the slot is then cleared), else the
    /// fingerprint takes the slot and the block is declined.
    fn admit(&mut self, key: &CacheKey) -> bool {
        let mask = self.ghosts.len().wrapping_sub(1);
        let h = mix(key.file_number, key.offset, GHOST_SEED) | 1;
        let Some(slot) = self.ghosts.get_mut(h as usize & mask) else {
            return true;
        };
        if *slot == h {
            *slot = 0;
            true
        } else {
            *slot = h;
            self.counters.declined += 1;
            false
        }
    }

    fn usage(&self) -> usize {
        self.probation.bytes + self.protected.bytes
    }

    fn node(&mut self, i: u32) -> Option<&mut Node> {
        self.nodes.get_mut(i as usize)
    }

    fn list(&mut self, s: Segment) -> &mut List {
        match s {
            Segment::Probation => &mut self.probation,
            Segment::Protected => &mut self.protected,
        }
    }

    /// Unlinks node `i` from its segment's list.
    fn unlink(&mut self, i: u32) {
        let Some(n) = self.node(i) else { return };
        let (prev, next, seg, charge) = (n.prev, n.next, n.segment, n.charge);
        n.prev = NIL;
        n.next = NIL;
        match self.node(prev) {
            Some(p) => p.next = next,
            None => self.list(seg).head = next,
        }
        match self.node(next) {
            Some(nx) => nx.prev = prev,
            None => self.list(seg).tail = prev,
        }
        self.list(seg).bytes -= charge;
    }

    /// Links node `i` at the most recently used end of segment `seg`.
    fn push_mru(&mut self, i: u32, seg: Segment) {
        let tail = self.list(seg).tail;
        let Some(n) = self.node(i) else { return };
        n.segment = seg;
        n.prev = tail;
        n.next = NIL;
        let charge = n.charge;
        match self.node(tail) {
            Some(t) => t.next = i,
            None => self.list(seg).head = i,
        }
        let l = self.list(seg);
        l.tail = i;
        l.bytes += charge;
    }

    /// Frees slot `i` (already unlinked), returning its block so the caller
    /// can drop it outside the lock.
    fn release(&mut self, i: u32) -> Option<Arc<Block>> {
        let n = self.node(i)?;
        let key = n.key;
        let block = n.block.take();
        self.map.remove(&key);
        self.free.push(i);
        block
    }

    fn lookup(&mut self, key: &CacheKey, priority: Priority) -> Lookup {
        match self.get(key) {
            Some(b) => Lookup::Hit(b),
            None => Lookup::Miss {
                admit: priority == Priority::High || self.admit(key),
            },
        }
    }

    /// Demotes protected LRU blocks to the probation MRU end until the
    /// protected segment is within its budget again (the block just
    /// protected too, if it alone exceeds the budget).
    fn trim_protected(&mut self) {
        while self.protected.bytes > self.protected_cap && self.protected.head != NIL {
            let victim = self.protected.head;
            self.unlink(victim);
            self.push_mru(victim, Segment::Probation);
        }
    }

    fn get(&mut self, key: &CacheKey) -> Option<Arc<Block>> {
        let Some(&i) = self.map.get(key) else {
            self.counters.misses += 1;
            return None;
        };
        self.counters.hits += 1;
        let seg = self.nodes.get(i as usize).map(|n| n.segment)?;
        self.unlink(i);
        self.push_mru(i, Segment::Protected);
        if seg == Segment::Probation {
            self.counters.promotions += 1;
            self.trim_protected();
        }
        self.nodes.get(i as usize).and_then(|n| n.block.clone())
    }

    /// Removes `key` if present; returns its block for dropping outside the
    /// lock.
    fn remove(&mut self, key: &CacheKey) -> Option<Arc<Block>> {
        let &i = self.map.get(key)?;
        self.unlink(i);
        self.counters.erasures += 1;
        self.release(i)
    }

    /// Evicts the least recently used block: probation first, protected
    /// only when probation is empty.
    fn evict_one(&mut self, dropped: &mut Vec<Arc<Block>>) -> bool {
        let victim = if self.probation.head != NIL {
            self.probation.head
        } else {
            self.protected.head
        };
        if victim == NIL {
            return false;
        }
        self.unlink(victim);
        self.counters.evictions += 1;
        dropped.extend(self.release(victim));
        true
    }

    /// Inserts `block` at the MRU end of probation (`Low`) or protected
    /// (`High`), replacing an entry of the same key, evicting as needed;
    /// evicted and replaced blocks are pushed on `dropped`.
    fn insert(
        &mut self,
        key: CacheKey,
        block: Arc<Block>,
        priority: Priority,
        dropped: &mut Vec<Arc<Block>>,
    ) {
        if let Some(b) = self.remove(&key) {
            // A replacement is not an erasure by the caller.
            self.counters.erasures -= 1;
            self.counters.evictions += 1;
            dropped.push(b);
        }
        let charge = block.size();
        if charge > self.capacity {
            self.counters.rejected += 1;
            dropped.push(block);
            return;
        }
        while self.usage() + charge > self.capacity {
            if !self.evict_one(dropped) {
                break;
            }
        }
        let node = Node {
            key,
            block: Some(block),
            charge,
            segment: Segment::Probation,
            prev: NIL,
            next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(slot) = self.nodes.get_mut(i as usize) {
                    *slot = node;
                }
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        self.map.insert(key, i);
        self.counters.inserts += 1;
        match priority {
            Priority::Low => self.push_mru(i, Segment::Probation),
            Priority::High => {
                self.push_mru(i, Segment::Protected);
                self.trim_protected();
            }
        }
    }
}

/// Exact counters of a [`BlockCache`], summed over its shards.
///
/// Identities: `entries = inserts - evictions - erasures`; `usage_bytes =
/// probation_bytes + protected_bytes <= capacity_bytes`; every `get` is
/// either a hit or a miss. A block re-inserted under a key already cached
/// counts as one eviction (of the old block) and one insert.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockCacheStats {
    /// Lookups that found a block.
    pub hits: u64,
    /// Lookups that found none.
    pub misses: u64,
    /// Blocks cached.
    pub inserts: u64,
    /// Blocks dropped to make room (or replaced by a re-insert).
    pub evictions: u64,
    /// Blocks dropped by [`BlockCache::erase`].
    pub erasures: u64,
    /// Blocks refused because they are larger than a shard's budget.
    pub rejected: u64,
    /// Probation blocks promoted to the protected segment by a hit.
    pub promotions: u64,
    /// Misses the doorkeeper declined to admit (first misses); at most
    /// `misses`.
    pub declined: u64,
    /// Blocks currently cached.
    pub entries: u64,
    /// Bytes charged in the probation segment.
    pub probation_bytes: u64,
    /// Bytes charged in the protected segment.
    pub protected_bytes: u64,
    /// Bytes charged in total.
    pub usage_bytes: u64,
    /// Budget in bytes (the sum of the shards' budgets).
    pub capacity_bytes: u64,
}

/// Sharded segmented-LRU cache of decoded blocks, charged by block size
/// (see the module documentation for the policy).
pub struct BlockCache {
    shards: Vec<Mutex<Shard>>,
}

impl BlockCache {
    /// A cache holding at most about `capacity_bytes` of block contents,
    /// split over [`NUM_SHARDS`] shards.
    pub fn new(capacity_bytes: usize) -> BlockCache {
        BlockCache::with_doorkeeper(capacity_bytes, false)
    }

    /// A cache of `capacity_bytes`, with a doorkeeper if `doorkeeper` (see
    /// the module documentation: [`BlockCache::lookup`] then admits a block
    /// on its second miss).
    pub fn with_doorkeeper(capacity_bytes: usize, doorkeeper: bool) -> BlockCache {
        let per_shard = capacity_bytes.div_ceil(NUM_SHARDS);
        // Twice the shard's capacity in 4 KiB blocks: a fingerprint
        // survives about that many other first misses of its shard.
        let ghosts = if doorkeeper {
            (per_shard / 2048).max(64).next_power_of_two()
        } else {
            0
        };
        let shards = (0..NUM_SHARDS)
            .map(|_| {
                let mut s = Shard::new(per_shard);
                s.ghosts = vec![0; ghosts];
                Mutex::new(s)
            })
            .collect();
        BlockCache { shards }
    }

    fn shard(&self, key: &CacheKey) -> MutexGuard<'_, Shard> {
        // A panic while holding the lock cannot leave a shard in a state
        // that matters for a cache; keep going.
        crate::sync::lock(&self.shards[key.shard()])
    }

    /// The cached block, marking it recently used (promoting it out of
    /// probation); counts a hit or a miss.
    pub fn get(&self, key: &CacheKey) -> Option<Arc<Block>> {
        self.shard(key).get(key)
    }

    /// Like [`BlockCache::get`] (a hit or a miss counted), and on a miss
    /// whether the block, once read, should be inserted: the doorkeeper's
    /// decision, always true without one. The readers' entry point.
    pub fn lookup(&self, key: &CacheKey, priority: Priority) -> Lookup {
        self.shard(key).lookup(key, priority)
    }

    /// Caches `block` under `key` in the segment its `priority` names,
    /// evicting blocks of its shard to stay within the shard's budget.
    /// Evicted blocks are dropped after the lock is released.
    pub fn insert(&self, key: CacheKey, block: Arc<Block>, priority: Priority) {
        // A per-thread vector, so that an insert that evicts allocates
        // nothing (one allocation and free per evicting insert otherwise).
        let mut dropped = EVICTED.try_with(Cell::take).unwrap_or_default();
        self.shard(&key).insert(key, block, priority, &mut dropped);
        dropped.clear();
        let _ = EVICTED.try_with(|d| d.set(dropped));
    }

    /// Drops one block if present.
    pub fn erase(&self, key: &CacheKey) {
        let b = self.shard(key).remove(key);
        drop(b);
    }

    /// Bytes currently charged.
    pub fn usage(&self) -> u64 {
        self.stats().usage_bytes
    }

    /// Budget in bytes (the sum of the shards' budgets).
    pub fn capacity(&self) -> u64 {
        self.stats().capacity_bytes
    }

    /// Lookups that found a block / found none, since creation.
    pub fn hits_and_misses(&self) -> (u64, u64) {
        let s = self.stats();
        (s.hits, s.misses)
    }

    /// All counters, summed over the shards (each shard read under its
    /// lock; shards are read one after another).
    pub fn stats(&self) -> BlockCacheStats {
        let mut s = BlockCacheStats::default();
        for shard in &self.shards {
            let g = crate::sync::lock(shard);
            let c = g.counters;
            s.hits += c.hits;
            s.misses += c.misses;
            s.inserts += c.inserts;
            s.evictions += c.evictions;
            s.erasures += c.erasures;
            s.rejected += c.rejected;
            s.promotions += c.promotions;
            s.declined += c.declined;
            s.entries += g.map.len() as u64;
            s.probation_bytes += g.probation.bytes as u64;
            s.protected_bytes += g.protected.bytes as u64;
            s.usage_bytes += g.usage() as u64;
            s.capacity_bytes += g.capacity as u64;
        }
        s
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

    fn k(o: u64) -> CacheKey {
        CacheKey {
            file_number: 9,
            offset: o,
        }
    }

    /// Walks both lists and checks the shard invariants.
    fn check(shard: &Shard) {
        let mut seen = 0;
        for (list, seg) in [
            (shard.probation, Segment::Probation),
            (shard.protected, Segment::Protected),
        ] {
            let (mut i, mut prev, mut bytes) = (list.head, NIL, 0);
            while i != NIL {
                let n = &shard.nodes[i as usize];
                assert_eq!(n.segment, seg);
                assert_eq!(n.prev, prev);
                assert_eq!(shard.map.get(&n.key), Some(&i));
                bytes += n.charge;
                seen += 1;
                prev = i;
                i = n.next;
            }
            assert_eq!(list.tail, prev);
            assert_eq!(list.bytes, bytes);
        }
        assert_eq!(seen, shard.map.len());
        assert!(shard.usage() <= shard.capacity);
        assert!(shard.protected.bytes <= shard.protected_cap);
    }

    fn counters_add_up(c: &BlockCache) {
        let s = c.stats();
        assert_eq!(s.entries, s.inserts - s.evictions - s.erasures, "{s:?}");
        assert_eq!(s.usage_bytes, s.probation_bytes + s.protected_bytes);
        assert!(s.usage_bytes <= s.capacity_bytes);
    }

    /// Reads through `lookup` as `Table::read_block` does: a hit, or a
    /// miss that inserts when admitted. Returns true on a hit.
    fn read(cache: &BlockCache, key: CacheKey, b: &Arc<Block>) -> bool {
        read_as(cache, key, b, Priority::Low)
    }

    fn read_as(cache: &BlockCache, key: CacheKey, b: &Arc<Block>, p: Priority) -> bool {
        match cache.lookup(&key, p) {
            Lookup::Hit(_) => true,
            Lookup::Miss { admit } => {
                if admit {
                    cache.insert(key, Arc::clone(b), p);
                }
                false
            }
        }
    }

    /// A high-priority block is cached on its first miss, even with a
    /// doorkeeper, and stays through a stream of data blocks missed twice
    /// (admitted to probation) many times the cache's size; a hot
    /// high-priority set larger than the protected budget is demoted, not
    /// dropped, and the budget holds.
    #[test]
    fn high_priority_blocks_are_admitted_at_once_and_outlive_data_streams() {
        let cache = BlockCache::with_doorkeeper(NUM_SHARDS * 100_000, true);
        let b = block(1000);
        let meta = |o: u64| CacheKey {
            file_number: 7,
            offset: o,
        };
        for o in 0..200 {
            assert!(!read_as(&cache, meta(o), &b, Priority::High));
        }
        assert_eq!(cache.stats().declined, 0);
        // Data blocks, each missed twice in a row (so admitted), ten
        // times the capacity.
        for o in 0..20_000u64 {
            let key = CacheKey {
                file_number: 8,
                offset: o,
            };
            assert!(!read(&cache, key, &b));
            assert!(!read(&cache, key, &b));
        }
        for o in 0..200 {
            assert!(read_as(&cache, meta(o), &b, Priority::High), "{o}");
        }
        counters_add_up(&cache);
        // More high-priority blocks than the protected budget holds.
        let small = BlockCache::new(NUM_SHARDS * 10 * b.size());
        for o in 0..100 {
            read_as(&small, meta(o), &b, Priority::High);
            let s = small.stats();
            assert!(s.protected_bytes <= s.capacity_bytes / 100 * PROTECTED_PERCENT as u64);
        }
        counters_add_up(&small);
        for shard in &small.shards {
            check(&crate::sync::lock(shard));
        }
    }

    /// With a doorkeeper, a block is cached on its second miss, not its
    /// first; a scan of blocks read once leaves the cached blocks (and the
    /// insert and eviction counters) untouched. Without one, every miss is
    /// admitted.
    #[test]
    fn doorkeeper_admits_a_block_on_its_second_miss() {
        let b = block(200);
        let cache = BlockCache::with_doorkeeper(64 * 1024, true);
        // First miss: declined; second: admitted; third read: a hit.
        assert!(!read(&cache, k(1), &b));
        assert_eq!(cache.stats().entries, 0);
        assert!(!read(&cache, k(1), &b));
        assert_eq!(cache.stats().entries, 1);
        assert!(read(&cache, k(1), &b));
        // A hot set read twice, then a long one-pass scan.
        for o in 100..140 {
            read(&cache, k(o), &b);
            read(&cache, k(o), &b);
        }
        let before = cache.stats();
        assert_eq!(before.entries, 41);
        for o in 10_000..60_000 {
            assert!(!read(&cache, k(o), &b));
        }
        let after = cache.stats();
        assert_eq!(
            after.inserts, before.inserts,
            "a one-pass scan inserts nothing"
        );
        assert_eq!(after.evictions, 0);
        assert_eq!(after.declined - before.declined, 50_000);
        assert!(
            (100..140).all(|o| read(&cache, k(o), &b)),
            "the hot set survives the scan"
        );
        assert!(after.declined <= after.misses);
        counters_add_up(&cache);

        // Without a doorkeeper the scan cycles through the cache.
        let plain = BlockCache::with_doorkeeper(64 * 1024, false);
        assert!(!read(&plain, k(1), &b));
        assert!(read(&plain, k(1), &b));
        for o in 10_000..12_000 {
            read(&plain, k(o), &b);
        }
        let s = plain.stats();
        assert_eq!((s.inserts, s.declined), (2001, 0));
        assert!(s.evictions > 0);
    }

    #[test]
    fn capacity_is_respected_and_counters_add_up() {
        let cache = BlockCache::new(16 * 1000);
        let b = block(200);
        let charge = b.size() as u64;
        for off in 0..2000u64 {
            cache.insert(
                CacheKey {
                    file_number: 1,
                    offset: off,
                },
                Arc::clone(&b),
                Priority::Low,
            );
            assert!(cache.usage() <= 16 * 1000);
            if off % 3 == 0 {
                assert!(cache
                    .get(&CacheKey {
                        file_number: 1,
                        offset: off,
                    })
                    .is_some());
            }
        }
        let s = cache.stats();
        assert_eq!(s.inserts, 2000);
        assert_eq!(s.usage_bytes, s.entries * charge);
        assert!(s.entries > 0 && s.evictions > 0);
        counters_add_up(&cache);
        for shard in &cache.shards {
            check(&shard.lock().unwrap());
        }
    }

    #[test]
    fn hot_set_survives_a_scan_of_ten_times_the_capacity() {
        let b = block(200);
        let charge = b.size();
        let mut shard = Shard::new(100 * charge);
        let mut dropped = Vec::new();
        // Hot set: 60 blocks, each inserted then hit (promoted).
        for o in 0..60 {
            shard.insert(k(o), Arc::clone(&b), Priority::Low, &mut dropped);
            assert!(shard.get(&k(o)).is_some());
        }
        check(&shard);
        // A scan of 10x the capacity, each block read once.
        for o in 1000..2000 {
            assert!(shard.get(&k(o)).is_none());
            shard.insert(k(o), Arc::clone(&b), Priority::Low, &mut dropped);
            check(&shard);
        }
        for o in 0..60 {
            assert!(shard.get(&k(o)).is_some(), "hot block {o} was flushed");
        }
        // The scan's blocks went through probation only.
        assert_eq!(shard.counters.evictions, 1000 - 40);
        assert_eq!(shard.usage(), 100 * charge);
        check(&shard);
    }

    #[test]
    fn protected_overflow_demotes_to_probation_lru_order() {
        let b = block(200);
        let charge = b.size();
        // 10 blocks fit; protected holds 8.
        let mut shard = Shard::new(10 * charge);
        let mut dropped = Vec::new();
        for o in 0..10 {
            shard.insert(k(o), Arc::clone(&b), Priority::Low, &mut dropped);
        }
        for o in 0..10 {
            assert!(shard.get(&k(o)).is_some());
            check(&shard);
        }
        // 0 and 1 were demoted (least recently promoted), nothing dropped.
        assert_eq!(shard.map.len(), 10);
        assert_eq!(shard.protected.bytes, 8 * charge);
        assert_eq!(shard.counters.promotions, 10);
        shard.insert(k(10), Arc::clone(&b), Priority::Low, &mut dropped);
        assert!(shard.get(&k(0)).is_none(), "probation LRU goes first");
        assert!(shard.map.contains_key(&k(1)));
        // Re-inserting a key replaces it without double charging.
        let before = shard.usage();
        shard.insert(k(10), Arc::clone(&b), Priority::Low, &mut dropped);
        assert_eq!(shard.usage(), before);
        // A block larger than the shard is not cached.
        shard.insert(k(11), block(20 * charge), Priority::Low, &mut dropped);
        assert!(shard.get(&k(11)).is_none());
        assert_eq!(shard.counters.rejected, 1);
        check(&shard);
        // Evicting with an empty probation takes the protected LRU.
        let mut small = Shard::new(2 * charge);
        small.insert(k(1), Arc::clone(&b), Priority::Low, &mut dropped);
        assert!(small.get(&k(1)).is_some());
        small.insert(k(2), Arc::clone(&b), Priority::Low, &mut dropped);
        small.insert(k(3), block(charge + 10), Priority::Low, &mut dropped);
        check(&small);
        assert!(small.map.contains_key(&k(3)));
    }

    #[test]
    fn hits_misses_erase_and_zero_capacity() {
        let cache = BlockCache::new(1 << 20);
        let key = CacheKey {
            file_number: 3,
            offset: 0,
        };
        assert!(cache.get(&key).is_none());
        cache.insert(key, block(10), Priority::Low);
        assert!(cache.get(&key).is_some());
        assert_eq!(cache.hits_and_misses(), (1, 1));
        cache.erase(&key);
        assert!(cache.get(&key).is_none());
        assert_eq!(cache.usage(), 0);
        let s = cache.stats();
        assert_eq!((s.inserts, s.erasures, s.entries), (1, 1, 0));
        counters_add_up(&cache);

        let none = BlockCache::new(0);
        none.insert(key, block(10), Priority::Low);
        assert!(none.get(&key).is_none());
        assert_eq!(none.usage(), 0);
        assert_eq!(none.stats().rejected, 1);
    }

    #[test]
    fn key_hasher_spreads_offsets_over_shards_and_buckets() {
        use std::hash::BuildHasher;
        let mut per_shard = [0usize; NUM_SHARDS];
        let mut low = std::collections::HashSet::new();
        let bh = BuildHasherDefault::<KeyHasher>::default();
        for o in 0..4096u64 {
            let key = CacheKey {
                file_number: 7,
                offset: o * 4096,
            };
            per_shard[key.shard()] += 1;
            low.insert(bh.hash_one(key) & 1023);
        }
        assert!(per_shard.iter().all(|&n| n > 150), "{per_shard:?}");
        assert!(low.len() > 900, "{}", low.len());
    }
}
