//! The memtable: a concurrent skiplist of internal keys.
//!
//! Writes are inserted by the single write-group leader while any number of
//! readers search it; a reader at snapshot `s` ignores entries with
//! `seq > s`, so entries inserted but not yet published (sequence above the
//! database's visible sequence) are never seen. When the memtable reaches its
//! size budget it is frozen (becomes immutable), a new one takes its place,
//! and a background thread flushes the frozen one to an L0 table.
//!
//! Invariant: every entry of a memtable is also in the WAL file
//! `log_number`, so until the flushed table is recorded in the MANIFEST the
//! WAL can rebuild it.
//!
//! A memtable without a side structure may instead keep its entries in a
//! small skiplist in front of sorted runs ([`MemTable::with_runs`], see
//! [`runs`]): for trees written at random keys, whose inserts into one
//! large skiplist are dominated by cache misses.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::Result;
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo, ValueKind};

mod filter;
mod runs;
mod skiplist;

use filter::KeyFilter;
use runs::{RunStore, RunsIter};
use skiplist::{Entry, RawEntry, SkipList, Target};

/// Per-entry bookkeeping charged on top of key and value bytes.
const ENTRY_OVERHEAD: usize = 48;

/// The in-memory component: a concurrent skiplist of internal keys, with
/// an optional side structure fed every insert.
pub struct MemTable {
    /// Each entry's node is named to the side structure (see
    /// [`MemSide::on_add`]). Empty in runs mode.
    map: SkipList,
    /// Runs mode ([`MemTable::with_runs`]): every entry is here.
    runs: Option<RunStore>,
    approximate_bytes: AtomicUsize,
    /// The WAL file that holds this memtable's writes.
    log_number: u64,
    /// Side structure fed every insert (the secondary indexes' in-memory
    /// component), so index queries never scan the memtable.
    side: Option<Arc<dyn MemSide>>,
    /// Sequence-number zone map (PERSEID §4.4): the smallest and largest
    /// sequence number inserted (`u64::MAX` and 0 while empty).
    min_seq: AtomicU64,
    max_seq: AtomicU64,
    /// Bloom filter of the user keys inserted (see [`filter`]), if the
    /// options ask for one: lookups of absent keys skip the search.
    filter: Option<KeyFilter>,
}

/// A structure maintained alongside a memtable: sees every insert, after
/// the entry is in the skiplist and before its sequence number is visible.
pub trait MemSide: Send + Sync {
    /// Sees one inserted entry. `entry` names it in the memtable: the
    /// structure may keep it and read the value later
    /// ([`MemTable::value_of`]) without searching the skiplist.
    fn on_add(&self, seq: SeqNo, kind: ValueKind, user_key: &[u8], value: &[u8], entry: MemEntry);
    /// The structure as `Any`, for its owner to downcast.
    fn as_any(&self) -> &dyn std::any::Any;
    /// Bytes used, reported apart from the memtable's own
    /// ([`MemTable::side_bytes`]); not charged to its budget.
    fn approximate_bytes(&self) -> usize;
}

/// The entry a new entry shadows in its memtable: the newest older entry
/// of the same user key ([`MemTable::add_shadowing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shadowed<'a> {
    /// Its sequence number.
    pub seq: SeqNo,
    /// Its kind.
    pub kind: ValueKind,
    /// Its value (empty for a tombstone), in the memtable.
    pub value: &'a [u8],
}

/// One entry of a memtable, named without a borrow of it (given to its
/// side structure by [`MemSide::on_add`]): 16 bytes, no reference count.
/// Only the memtable it came from reads it back ([`MemTable::value_of`]).
#[derive(Clone, Copy)]
pub struct MemEntry(RawEntry);

/// What a memtable holds for a user key at a snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemGet {
    /// The newest visible entry is a value (its sequence number and value).
    Value(SeqNo, Vec<u8>),
    /// The newest visible entry is a tombstone.
    Deleted(SeqNo),
    /// The newest entry is a merge operand: the value needs the key's
    /// older entries too (see `merge::resolve_at`).
    Merge(SeqNo),
}

impl MemTable {
    /// An empty memtable whose writes are in WAL file `log_number`.
    pub fn new(log_number: u64) -> MemTable {
        Self::with_side(log_number, None)
    }

    /// [`MemTable::new`] with a side structure that sees every insert.
    pub fn with_side(log_number: u64, side: Option<Arc<dyn MemSide>>) -> MemTable {
        MemTable {
            map: SkipList::new(),
            runs: None,
            approximate_bytes: AtomicUsize::new(0),
            log_number,
            side,
            min_seq: AtomicU64::new(u64::MAX),
            max_seq: AtomicU64::new(0),
            filter: None,
        }
    }

    /// This memtable with a Bloom filter of about `bytes` bytes over its
    /// user keys (none if 0). Set before any insert.
    pub fn with_key_filter(mut self, bytes: usize) -> MemTable {
        self.filter = (bytes > 0).then(|| KeyFilter::with_bytes(bytes));
        self
    }

    /// This memtable in runs mode: a skiplist of at most `run_entries`
    /// entries in front of sorted runs (see [`runs`]), if `run_entries` is
    /// not 0 and the memtable has no side structure. Set before any
    /// insert. In runs mode [`MemTable::add_shadowing`] reports no
    /// shadowed entry and [`MemTable::value_of`] reads nothing: the
    /// engine uses runs mode only where no hook asks for either.
    pub fn with_runs(mut self, run_entries: usize) -> MemTable {
        if run_entries > 0 && self.side.is_none() {
            self.runs = Some(RunStore::new(run_entries));
        }
        self
    }

    /// True in runs mode ([`MemTable::with_runs`]).
    pub fn in_runs_mode(&self) -> bool {
        self.runs.is_some()
    }

    /// Sorted runs held in runs mode (0 otherwise), for tests and
    /// statistics.
    pub fn sorted_runs(&self) -> usize {
        self.runs.as_ref().map_or(0, RunStore::runs)
    }

    /// True if the key filter rules `user_key` out.
    fn certainly_absent(&self, user_key: &[u8]) -> bool {
        self.filter
            .as_ref()
            .is_some_and(|f| !f.may_contain(user_key))
    }

    /// May the memtable hold an entry of `user_key`? Its greatest key,
    /// then its key filter when it has one (no search: a `true` may be
    /// wrong), else a search. A `false` is certain.
    pub fn may_hold(&self, user_key: &[u8]) -> bool {
        if self
            .map
            .last()
            .is_none_or(|l| key::user_key(l.key()) < user_key)
        {
            return false;
        }
        match &self.filter {
            Some(f) => f.may_contain(user_key),
            None => self.newest_seq(user_key).is_some(),
        }
    }

    /// Prepares the insert of `user_key` (the key filter's line asked
    /// for): called by the write leader before the work that precedes the
    /// insert (WAL record, index hooks), so that the line's cache miss
    /// overlaps that work (perf, NEXT ingest of 2 M tweets: the filter's
    /// insert stalled on it for ~10% of the writer's time).
    pub fn prepare_insert(&self, user_key: &[u8]) {
        if let Some(f) = &self.filter {
            f.prefetch(user_key);
        }
    }

    /// Bytes of the key filter (0 without one).
    pub fn filter_bytes(&self) -> usize {
        self.filter.as_ref().map_or(0, KeyFilter::bytes)
    }

    /// The side structure, if any.
    pub fn side(&self) -> Option<&Arc<dyn MemSide>> {
        self.side.as_ref()
    }

    /// The WAL file that holds this memtable's writes.
    pub fn log_number(&self) -> u64 {
        self.log_number
    }

    /// Inserts one entry and returns it. `(user_key, seq)` must be new to
    /// this memtable.
    pub fn add(&self, seq: SeqNo, kind: ValueKind, user_key: &[u8], value: &[u8]) -> MemEntry {
        self.add_inner(seq, kind, user_key, value, false).0
    }

    /// As [`MemTable::add`], also returning the entry the new one shadows:
    /// the newest entry of `user_key` this memtable held (`None`: none),
    /// found by the insert's own search, with its value in place.
    pub fn add_shadowing(
        &self,
        seq: SeqNo,
        kind: ValueKind,
        user_key: &[u8],
        value: &[u8],
    ) -> (MemEntry, Option<Shadowed<'_>>) {
        self.add_inner(seq, kind, user_key, value, true)
    }

    /// [`MemTable::add`], with the shadowed entry if `shadow`.
    fn add_inner(
        &self,
        seq: SeqNo,
        kind: ValueKind,
        user_key: &[u8],
        value: &[u8],
        shadow: bool,
    ) -> (MemEntry, Option<Shadowed<'_>>) {
        // Before the sequence number is published, like the entry itself.
        if let Some(f) = &self.filter {
            f.insert(user_key);
        }
        self.approximate_bytes.fetch_add(
            user_key.len() + key::TRAILER_LEN + value.len() + ENTRY_OVERHEAD,
            Ordering::Relaxed,
        );
        // Stored in the skiplist's node (no allocation).
        let trailer = key::pack_trailer(seq, kind);
        let (raw, next) = match &self.runs {
            Some(r) => {
                // Layers hold increasing sequence numbers (runs' R1).
                debug_assert!(self.max_seq.load(Ordering::Relaxed) < seq || r.len() == 0);
                (r.insert(user_key, trailer, value), None)
            }
            None => self.map.insert_next(user_key, trailer, value),
        };
        let entry = MemEntry(raw);
        let shadowed = next.filter(|_| shadow).and_then(|e| {
            let p = key::parse_internal_key(e.key()).ok()?;
            (p.user_key == user_key).then(|| Shadowed {
                seq: p.seq,
                kind: p.kind,
                value: e.value(),
            })
        });
        // Before the entry's sequence number is published (the write path
        // publishes after the insert), so a reader that may see `seq`
        // also sees it inside the range.
        self.min_seq.fetch_min(seq, Ordering::SeqCst);
        self.max_seq.fetch_max(seq, Ordering::SeqCst);
        if let Some(side) = &self.side {
            side.on_add(seq, kind, user_key, value, entry);
        }
        (entry, shadowed)
    }

    /// The value of `entry` (from this memtable's [`MemSide::on_add`]);
    /// `None` for an entry of another memtable.
    pub fn value_of(&self, entry: MemEntry) -> Option<&[u8]> {
        entry.0.get(&self.map).map(|e| e.value())
    }

    /// Bytes used by keys, values and per-entry overhead: what the
    /// memtable budget (`Options::memtable_size`) limits. The side
    /// structure is accounted apart ([`MemTable::side_bytes`]).
    pub fn approximate_bytes(&self) -> usize {
        self.approximate_bytes.load(Ordering::Relaxed)
    }

    /// Bytes used by the side structure (0 without one).
    pub fn side_bytes(&self) -> usize {
        self.side.as_ref().map_or(0, |s| s.approximate_bytes())
    }

    /// The sequence-number zone map: smallest and largest sequence number
    /// inserted, `None` while empty. Every entry a reader at a published
    /// sequence number may see lies inside it.
    pub fn seq_range(&self) -> Option<(SeqNo, SeqNo)> {
        let (lo, hi) = (
            self.min_seq.load(Ordering::SeqCst),
            self.max_seq.load(Ordering::SeqCst),
        );
        (lo <= hi).then_some((lo, hi))
    }

    /// True if no entry was inserted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entries inserted.
    pub fn len(&self) -> usize {
        match &self.runs {
            Some(r) => r.len(),
            None => self.map.len(),
        }
    }

    /// Newest entry of `user_key` with `seq <= snapshot`.
    pub fn get(&self, user_key: &[u8], snapshot: SeqNo) -> Option<MemGet> {
        let get = |seq, kind, value: &[u8]| match kind {
            ValueKind::Value => MemGet::Value(seq, value.to_vec()),
            ValueKind::Deletion => MemGet::Deleted(seq),
            ValueKind::Merge => MemGet::Merge(seq),
        };
        if let Some(r) = &self.runs {
            return self.newest_in_runs(r, user_key, snapshot, get);
        }
        let (entry, seq, kind) = self.newest_entry(user_key, snapshot)?;
        Some(get(seq, kind, entry.value()))
    }

    /// Sequence number and kind of the newest entry of `user_key` with
    /// `seq <= snapshot`, without copying its value.
    pub fn newest_version(&self, user_key: &[u8], snapshot: SeqNo) -> Option<(SeqNo, ValueKind)> {
        if let Some(r) = &self.runs {
            return self.newest_in_runs(r, user_key, snapshot, |seq, kind, _| (seq, kind));
        }
        self.newest_entry(user_key, snapshot)
            .map(|(_, seq, kind)| (seq, kind))
    }

    /// `f(seq, kind, value)` of the newest entry of `user_key` with
    /// `seq <= snapshot`, in runs mode (the key filter first).
    fn newest_in_runs<T>(
        &self,
        r: &RunStore,
        user_key: &[u8],
        snapshot: SeqNo,
        f: impl FnOnce(SeqNo, ValueKind, &[u8]) -> T,
    ) -> Option<T> {
        if self.certainly_absent(user_key) {
            return None;
        }
        let trailer = key::pack_trailer(snapshot, key::KIND_FOR_SEEK);
        r.newest(user_key, trailer, |ikey, value| {
            let p = key::parse_internal_key(ikey).ok()?;
            Some(f(p.seq, p.kind, value))
        })
        .flatten()
    }

    /// Sequence number of the newest entry of `user_key` (any kind), without
    /// copying its value; `None` if the memtable holds none.
    pub fn newest_seq(&self, user_key: &[u8]) -> Option<SeqNo> {
        self.newest_version(user_key, key::MAX_SEQ)
            .map(|(seq, _)| seq)
    }

    /// The newest entry of `user_key` with `seq <= snapshot`, with its
    /// sequence number and kind (the key filter first).
    fn newest_entry(
        &self,
        user_key: &[u8],
        snapshot: SeqNo,
    ) -> Option<(Entry<'_>, SeqNo, ValueKind)> {
        // A key above the greatest (time-ordered ids: almost every new
        // key) is answered without the key filter, whose probe missed the
        // cache (perf, NEXT ingest of 2 M tweets: the update memo's
        // existence check spent 6% of the writer's time here).
        if self
            .map
            .last()
            .is_none_or(|l| key::user_key(l.key()) < user_key)
        {
            return None;
        }
        if self.certainly_absent(user_key) {
            return None;
        }
        let target = Target::new(user_key, key::pack_trailer(snapshot, key::KIND_FOR_SEEK));
        let entry = self.map.lower_bound(&target)?;
        let parsed = key::parse_internal_key(entry.key()).ok()?;
        if parsed.user_key != user_key {
            return None;
        }
        let (seq, kind) = (parsed.seq, parsed.kind);
        Some((entry, seq, kind))
    }

    /// Visits every entry in internal-key order (used by flush and by index
    /// strategies that scan the memtable).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8]) -> Result<()>) -> Result<()> {
        if let Some(r) = &self.runs {
            return r.iter().for_each(f);
        }
        let mut e = self.map.first();
        while let Some(cur) = e {
            f(cur.key(), cur.value())?;
            e = cur.next();
        }
        Ok(())
    }

    /// A cursor over the memtable. It owns an `Arc` of the memtable, so it
    /// stays valid after the memtable is frozen or flushed.
    pub fn iter(self: &Arc<Self>) -> MemTableIter {
        MemTableIter {
            mem: self.clone(),
            current: None,
            runs: self.runs.as_ref().map(RunStore::iter),
        }
    }
}

/// Cursor over a memtable. It holds the skiplist entry it is on, so a step
/// follows the entry's successor link instead of searching the skiplist
/// again, and keys and values are read in place, never copied. (A search
/// per step with copies of both was 25% of a chirp replay's instructions
/// with `composite`, whose queries scan the index tree's memtable.)
pub struct MemTableIter {
    /// Owns the memtable, so the cursor stays valid after the memtable is
    /// frozen or flushed.
    mem: Arc<MemTable>,
    /// An entry of `mem.map` (none when exhausted or not positioned).
    current: Option<RawEntry>,
    /// In runs mode: the cursor over the layers at the time the cursor
    /// was made (`current` is unused).
    runs: Option<RunsIter>,
}

impl MemTableIter {
    fn current(&self) -> Option<Entry<'_>> {
        // `current` came from `self.mem.map`, which `self.mem` keeps alive.
        self.current.and_then(|e| e.get(&self.mem.map))
    }
}

impl InternalIterator for MemTableIter {
    fn valid(&self) -> bool {
        match &self.runs {
            Some(r) => r.valid(),
            None => self.current().is_some(),
        }
    }
    fn seek_to_first(&mut self) -> Result<()> {
        if let Some(r) = &mut self.runs {
            return r.seek_to_first();
        }
        self.current = self.mem.map.first().map(|e| e.raw());
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        if let Some(r) = &mut self.runs {
            return r.seek(target);
        }
        self.current = self
            .mem
            .map
            .lower_bound(&Target::from_internal(target))
            .map(|e| e.raw());
        Ok(())
    }
    fn next(&mut self) -> Result<()> {
        if let Some(r) = &mut self.runs {
            return r.next();
        }
        self.current = self.current().and_then(|e| e.next()).map(|e| e.raw());
        Ok(())
    }
    fn key(&self) -> &[u8] {
        match &self.runs {
            Some(r) => r.key(),
            None => self.current().map_or(&[], |e| e.key()),
        }
    }
    fn value(&self) -> &[u8] {
        match &self.runs {
            Some(r) => r.value(),
            None => self.current().map_or(&[], |e| e.value()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_respects_snapshot_and_tombstones() {
        let m = MemTable::new(1);
        m.add(1, ValueKind::Value, b"a", b"v1");
        m.add(2, ValueKind::Value, b"a", b"v2");
        m.add(3, ValueKind::Deletion, b"a", b"");
        m.add(4, ValueKind::Value, b"b", b"x");
        assert_eq!(m.get(b"a", 1), Some(MemGet::Value(1, b"v1".to_vec())));
        assert_eq!(m.get(b"a", 2), Some(MemGet::Value(2, b"v2".to_vec())));
        assert_eq!(m.get(b"a", 10), Some(MemGet::Deleted(3)));
        assert_eq!(m.get(b"a", 0), None);
        assert_eq!(m.get(b"c", 10), None);
        assert_eq!(m.get(b"", 10), None);
    }

    /// Growing keys (time-ordered ids): a key above the greatest is
    /// absent, and found once inserted, with or without a key filter; a
    /// key below it is searched as before.
    #[test]
    fn keys_above_the_greatest_are_absent_until_inserted() {
        for filter_bytes in [0, 1 << 16] {
            let m = MemTable::new(1).with_key_filter(filter_bytes);
            assert_eq!(m.get(b"k0001", key::MAX_SEQ), None);
            for i in 1..=1000u64 {
                let k = format!("k{i:04}");
                assert_eq!(m.newest_seq(k.as_bytes()), None, "{k}");
                m.add(i, ValueKind::Value, k.as_bytes(), b"v");
                assert_eq!(m.newest_seq(k.as_bytes()), Some(i), "{k}");
                // A longer key with the greatest as prefix sorts above it.
                assert_eq!(m.newest_seq(format!("{k}0").as_bytes()), None);
            }
            m.add(1001, ValueKind::Deletion, b"k0500", b"");
            assert_eq!(m.get(b"k0500", key::MAX_SEQ), Some(MemGet::Deleted(1001)));
            assert_eq!(
                m.get(b"k1000", key::MAX_SEQ),
                Some(MemGet::Value(1000, b"v".to_vec()))
            );
            assert_eq!(m.get(b"k1001", key::MAX_SEQ), None);
        }
    }

    /// A memtable with a key filter answers every lookup (`get`,
    /// `newest_seq`) as one without,
    /// for present and absent keys at every snapshot, with the filter
    /// overfull (8 KiB for 20 k keys) as well as roomy.
    #[test]
    fn key_filter_changes_no_answer() {
        for filter_bytes in [1, 1 << 20] {
            let plain = MemTable::new(1);
            let filtered = MemTable::new(1).with_key_filter(filter_bytes);
            assert!(filtered.filter_bytes() >= 8 << 10);
            let mut x: u64 = 0x2545_f491_4f6c_dd1d;
            let mut rnd = move || {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x
            };
            for seq in 1..=20_000u64 {
                let k = format!("k{}", rnd() % 30_000);
                let kind = if rnd() % 5 == 0 {
                    ValueKind::Deletion
                } else {
                    ValueKind::Value
                };
                let v = seq.to_le_bytes();
                plain.add(seq, kind, k.as_bytes(), &v);
                filtered.add(seq, kind, k.as_bytes(), &v);
            }
            let mut absent = 0;
            for i in 0..60_000u64 {
                let k = format!("k{i}");
                let snap = rnd() % 21_000;
                let want = plain.get(k.as_bytes(), snap);
                absent += usize::from(want.is_none());
                assert_eq!(filtered.get(k.as_bytes(), snap), want, "{k} at {snap}");
                let newest = plain.get(k.as_bytes(), key::MAX_SEQ).map(|g| match g {
                    MemGet::Value(s, _) | MemGet::Deleted(s) | MemGet::Merge(s) => s,
                });
                assert_eq!(filtered.newest_seq(k.as_bytes()), newest, "{k}");
                assert_eq!(plain.newest_seq(k.as_bytes()), newest, "{k}");
            }
            assert!(absent > 30_000);
        }
    }

    #[test]
    fn iterator_walks_in_internal_order() {
        let m = Arc::new(MemTable::new(1));
        m.add(5, ValueKind::Value, b"b", b"b5");
        m.add(1, ValueKind::Value, b"a", b"a1");
        m.add(7, ValueKind::Value, b"a", b"a7");
        let mut it = m.iter();
        it.seek_to_first().unwrap();
        let mut got = vec![];
        while it.valid() {
            got.push(it.value().to_vec());
            it.next().unwrap();
        }
        assert_eq!(got, vec![b"a7".to_vec(), b"a1".to_vec(), b"b5".to_vec()]);
        it.seek(&key::seek_key(b"a", 3)).unwrap();
        assert_eq!(it.value(), b"a1");
    }
}

#[cfg(test)]
mod runs_mode_tests {
    use super::skiplist::tests::xorshift;
    use super::*;

    fn collect(it: &mut MemTableIter, n: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        while it.valid() && out.len() < n {
            out.push((it.key().to_vec(), it.value().to_vec()));
            it.next().unwrap();
        }
        out
    }

    /// A memtable in runs mode answers every read (`get`,
    /// `newest_version`, `newest_seq`, `for_each`, cursors' seeks and
    /// steps) as one skiplist does, for keys of every length (shared
    /// heads, prefixes of each other), values, tombstones and merge
    /// operands, at every snapshot, with runs of several sizes (1: a run
    /// per insert).
    #[test]
    fn runs_mode_reads_as_one_skiplist() {
        for run_entries in [1, 7, 64] {
            let list = Arc::new(MemTable::new(1));
            let runs = Arc::new(MemTable::new(1).with_runs(run_entries));
            assert!(runs.in_runs_mode() && !list.in_runs_mode());
            let mut rnd = xorshift(0x9e37_79b9_7f4a_7c15 ^ run_entries as u64);
            let key = |r: u64| match r % 3 {
                0 => format!("user{:04}", r % 300).into_bytes(),
                1 => format!("user{:04}-a-long-suffix-{}", r % 300, r % 7).into_bytes(),
                _ => (r % 300).to_be_bytes()[5..].to_vec(),
            };
            let total = 3000u64;
            for seq in 1..=total {
                let k = key(rnd());
                let kind = match rnd() % 6 {
                    0 => ValueKind::Deletion,
                    1 => ValueKind::Merge,
                    _ => ValueKind::Value,
                };
                let v = format!("v{seq}").into_bytes();
                list.add(seq, kind, &k, &v);
                runs.add(seq, kind, &k, &v);
            }
            assert_eq!(runs.len(), list.len());
            assert!(runs.sorted_runs() >= 1, "{run_entries}: no run sealed");
            assert!(runs.sorted_runs() <= 13, "{}", runs.sorted_runs());
            for i in 0..2000u64 {
                let k = key(rnd());
                let snap = rnd() % (total + 10);
                assert_eq!(runs.get(&k, snap), list.get(&k, snap), "{k:?} at {snap}");
                assert_eq!(runs.newest_version(&k, snap), list.newest_version(&k, snap));
                assert_eq!(runs.newest_seq(&k), list.newest_seq(&k), "{i}");
            }
            let all = |m: &MemTable| {
                let mut v = Vec::new();
                m.for_each(|k, val| {
                    v.push((k.to_vec(), val.to_vec()));
                    Ok(())
                })
                .unwrap();
                v
            };
            let want = all(&list);
            assert_eq!(all(&runs), want);
            let (mut a, mut b) = (list.iter(), runs.iter());
            a.seek_to_first().unwrap();
            b.seek_to_first().unwrap();
            assert_eq!(collect(&mut b, usize::MAX), collect(&mut a, usize::MAX));
            for _ in 0..500 {
                let target = key::seek_key(&key(rnd()), rnd() % (total + 10));
                a.seek(&target).unwrap();
                b.seek(&target).unwrap();
                assert_eq!(collect(&mut b, 20), collect(&mut a, 20));
            }
        }
    }

    /// Readers running while the writer seals and merges runs see every
    /// entry at or below the published sequence number, in order, each
    /// once: a cursor keeps the layers it started on.
    #[test]
    fn readers_see_every_published_entry_while_runs_merge() {
        use std::sync::atomic::AtomicU64;
        let m = Arc::new(MemTable::new(1).with_runs(16));
        let published = Arc::new(AtomicU64::new(0));
        let total = 20_000u64;
        let reader = {
            let (m, published) = (m.clone(), published.clone());
            std::thread::spawn(move || {
                let mut rounds = 0;
                loop {
                    let at = published.load(Ordering::Acquire);
                    let mut it = m.iter();
                    it.seek_to_first().unwrap();
                    let (mut n, mut prev): (u64, Vec<u8>) = (0, Vec::new());
                    while it.valid() {
                        let k = it.key().to_vec();
                        assert!(prev.is_empty() || key::compare_internal(&prev, &k).is_lt());
                        let p = key::parse_internal_key(&k).unwrap();
                        n += u64::from(p.seq <= at);
                        prev = k;
                        it.next().unwrap();
                    }
                    assert_eq!(n, at, "entries visible at {at}");
                    let probe = format!("k{:05}", at * 7919 % total.max(1));
                    let _ = m.get(probe.as_bytes(), at);
                    rounds += 1;
                    if at == total {
                        return rounds;
                    }
                }
            })
        };
        for seq in 1..=total {
            let k = format!("k{:05}", seq * 7919 % total);
            m.add(seq, ValueKind::Value, k.as_bytes(), b"v");
            published.store(seq, Ordering::Release);
        }
        assert!(reader.join().unwrap() >= 1);
        assert_eq!(
            m.get(b"k07919", total),
            Some(MemGet::Value(1, b"v".to_vec()))
        );
    }
}

#[cfg(test)]
mod long_key_tests {
    use super::*;

    #[test]
    fn short_and_long_keys_order_and_read_alike() {
        let m = MemTable::new(1);
        let short = b"k".to_vec();
        let edge = vec![b'e'; 8];
        let long = vec![b'l'; 37];
        for (i, k) in [&short, &edge, &long].into_iter().enumerate() {
            m.add(10 + i as u64, ValueKind::Value, k, b"v1");
            m.add(20 + i as u64, ValueKind::Value, k, b"v2");
        }
        m.add(30, ValueKind::Deletion, &long, &[]);
        assert_eq!(m.get(&short, 15), Some(MemGet::Value(10, b"v1".to_vec())));
        assert_eq!(m.get(&edge, 100), Some(MemGet::Value(21, b"v2".to_vec())));
        assert_eq!(m.get(&long, 29), Some(MemGet::Value(22, b"v2".to_vec())));
        assert_eq!(m.get(&long, 30), Some(MemGet::Deleted(30)));
        assert_eq!(m.get(&long, 5), None);
        let mut keys = Vec::new();
        m.for_each(|k, _| {
            keys.push(k.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(keys.len(), 7);
        assert!(keys
            .windows(2)
            .all(|w| key::compare_internal(&w[0], &w[1]).is_lt()));
    }
}
