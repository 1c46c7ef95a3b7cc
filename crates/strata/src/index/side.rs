//! The memtable side structure of the strategies whose writes reach them
//! through tables ([`super::strategy::WritePath::Tables`]: NEXT, embedded):
//! each index's attribute values of the memtable's entries, so that index
//! queries never parse the memtable.
//!
//! Bytes (encoded values and keys) live in an [`Arena`] per index: an
//! insert copies them into the arena's current chunk, and entries are
//! fixed-size records naming their bytes by position, so the write path
//! makes no allocation per entry and a merge moves 32-byte records.

use std::any::Any;
use std::cmp::Ordering;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, RwLock};

use strata_lsm::key::{SeqNo, ValueKind};
use strata_lsm::memtable::{MemEntry, MemSide};

use super::def::{fields_of, read_doc, Doc, IndexMeta};
use super::fields::Fields;
use super::preread::PreReads;
use super::stored::{StoredBuilder, StoredValues};
use super::value::{IndexValue, Predicate};
use super::{read, write};

/// Append-only storage of side entries' bytes, in chunks of at least
/// [`CHUNK`] bytes. Invariant: bytes once written are never changed or
/// removed until the arena is dropped with its memtable; a position
/// (chunk, offset) stays valid for the arena's life (a chunk that outgrows
/// its capacity may move in memory, but positions are indexes, not
/// pointers).
#[derive(Default)]
struct Arena {
    chunks: Vec<Vec<u8>>,
}

/// Bytes per arena chunk (a larger entry gets a chunk of its own size).
const CHUNK: usize = 64 << 10;

impl Arena {
    /// Appends the bytes `fill` writes (about `hint` of them) and returns
    /// their (chunk, offset, length).
    fn push(&mut self, hint: usize, fill: impl FnOnce(&mut Vec<u8>)) -> (u32, u32, u32) {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= hint);
        if !fits {
            self.chunks.push(Vec::with_capacity(hint.max(CHUNK)));
        }
        let ci = self.chunks.len() - 1;
        let Some(chunk) = self.chunks.last_mut() else {
            unreachable!("a chunk was pushed above")
        };
        let off = chunk.len();
        fill(chunk);
        // A chunk holds less than u32::MAX bytes (see the assertion above).
        let len = chunk.len() - off;
        (ci as u32, off as u32, len as u32)
    }

    fn get(&self, chunk: u32, off: u32, len: u32) -> &[u8] {
        let (off, len) = (off as usize, len as usize);
        self.chunks
            .get(chunk as usize)
            .and_then(|c| c.get(off..off + len))
            .unwrap_or_default()
    }
}

// Arena positions are u32: an entry (an encoded value of a value of at
// most `MAX_VALUE_SIZE` bytes, and a key) fits, so every offset and length
// into a chunk does.
const _: () = assert!(
    strata_lsm::options::MAX_KEY_SIZE + strata_lsm::options::MAX_VALUE_SIZE + CHUNK
        < u32::MAX as usize
);

/// A memtable side entry: encoded value, key and sequence number, ordered
/// by value, then newest first. `value ‖ key` are in the arena at (`chunk`,
/// `off`); `head` holds the value's first 8 bytes (zero-padded,
/// big-endian), so most comparisons (the binary-counter merges of
/// [`SortedRuns`]) read no arena memory: when two heads differ, their order
/// is the values' byte order (a zero pad sorts like the end of a shorter
/// value, which is a prefix of the other).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SideEntry {
    head: u64,
    seq: SeqNo,
    chunk: u32,
    off: u32,
    vlen: u32,
    klen: u32,
}

/// The first 8 bytes of `v`, zero-padded, as a big-endian number.
fn head_of(v: &[u8]) -> u64 {
    let mut h = [0u8; 8];
    for (d, s) in h.iter_mut().zip(v) {
        *d = *s;
    }
    u64::from_be_bytes(h)
}

impl SideEntry {
    fn value<'a>(&self, a: &'a Arena) -> &'a [u8] {
        a.get(self.chunk, self.off, self.vlen)
    }

    fn key<'a>(&self, a: &'a Arena) -> &'a [u8] {
        a.get(self.chunk, self.off.wrapping_add(self.vlen), self.klen)
    }

    /// This entry's value against `v` (whose head is `head`). Values of at
    /// most 8 bytes with equal heads are each a prefix of the other (the
    /// heads' zero pads), so their lengths order them and the arena is not
    /// read (integers and most numbers: every comparison of a lookup).
    fn cmp_value(&self, a: &Arena, head: u64, v: &[u8]) -> Ordering {
        match self.head.cmp(&head) {
            Ordering::Equal if self.vlen <= 8 && v.len() <= 8 => (self.vlen as usize).cmp(&v.len()),
            Ordering::Equal => self.value(a).cmp(v),
            o => o,
        }
    }

    /// The order of entries: by value, then newest first (sequence
    /// numbers are distinct within a memtable), so a top-K lookup takes
    /// the first K of each run's value and a merge compares no keys.
    fn cmp(&self, o: &Self, a: &Arena) -> Ordering {
        self.cmp_value(a, o.head, o.value(a))
            .then(o.seq.cmp(&self.seq))
    }
}

/// One index's values, inserted by the write group's leader while readers
/// search. (One per index and memtable, behind an `Arc`: the variants'
/// size difference does not matter.)
#[allow(clippy::large_enum_variant)]
enum SideIndex {
    /// Ordered by (encoded value, newest first).
    Scalar(SortedRuns),
    /// (key, seq, value) in insertion order; queries test every entry,
    /// so an insert is an append (no ordering work on the write path).
    Spatial(RwLock<SpatialEntries>),
}

/// The spatial side entries and the arena of their keys.
#[derive(Default)]
struct SpatialEntries {
    entries: Vec<SpatialEntry>,
    keys: Arena,
}

/// A spatial side entry: key (in the arena), sequence number, value.
struct SpatialEntry {
    chunk: u32,
    off: u32,
    klen: u32,
    seq: SeqNo,
    value: IndexValue,
}

impl SpatialEntry {
    fn key<'a>(&self, a: &'a Arena) -> &'a [u8] {
        a.get(self.chunk, self.off, self.klen)
    }
}

/// Entries in sorted runs plus an unsorted tail: an insert appends (no
/// search, no per-entry ordering work on the write path, unlike a skiplist
/// of random values whose inserts miss the cache at every level). A query
/// first sorts a tail of [`TAIL_MAX`] entries or more into a run, and runs
/// of similar size are merged (moving entries, under the write lock), so
/// it binary-searches O(log n) runs and scans fewer than [`TAIL_MAX`]
/// entries (a few more if writes came meanwhile). The write path never
/// sorts. Readers hold the read lock while they search.
#[derive(Default)]
struct SortedRuns {
    state: RwLock<Runs>,
}

#[derive(Default)]
struct Runs {
    /// Each sorted; each less than half the size of the one before.
    runs: Vec<Run>,
    /// Unsorted: every entry written since the last query's
    /// [`SortedRuns::seal`].
    tail: Vec<SideEntry>,
    /// The bytes of every entry of `runs` and `tail`.
    arena: Arena,
}

/// A sorted run and, from [`FILTER_MIN`] entries on, a filter of its
/// values.
struct Run {
    entries: Vec<SideEntry>,
    filter: ValueFilter,
    /// The head of every [`SAMPLE_EVERY`]-th entry (`entries[i *
    /// SAMPLE_EVERY].head`): a search narrows to a few entries in this
    /// dense array first (an eighth of a cache line per sample), so it
    /// misses the cache a few times instead of at each probe of a run of
    /// 32-byte entries (perf, NEXT `UserID` lookups on the LevelDB++ 1 M
    /// mix: the run's binary search was a tenth of a lookup).
    samples: Vec<u64>,
}

/// Entries of a run per sample of [`Run::samples`].
const SAMPLE_EVERY: usize = 16;

impl Run {
    fn new(entries: Vec<SideEntry>, a: &Arena) -> Run {
        let filter = if entries.len() >= FILTER_MIN {
            ValueFilter::of(&entries, a)
        } else {
            ValueFilter::default()
        };
        let samples = entries
            .iter()
            .step_by(SAMPLE_EVERY)
            .map(|e| e.head)
            .collect();
        Run {
            entries,
            filter,
            samples,
        }
    }

    /// The first entry whose value is not less than `v` (whose head is
    /// `head`): [`SideEntry::cmp_value`]'s partition point. Entries are
    /// ordered by head first, so the samples bound it: past every entry
    /// up to the last sample with a smaller head, and not past the first
    /// sample with a greater one.
    fn lower_bound(&self, a: &Arena, head: u64, v: &[u8]) -> usize {
        let below = self.samples.partition_point(|&h| h < head);
        let not_above = self.samples.partition_point(|&h| h <= head);
        let lo = (below.saturating_sub(1) * SAMPLE_EVERY).min(self.entries.len());
        let hi = (not_above * SAMPLE_EVERY).clamp(lo, self.entries.len());
        let window = self.entries.get(lo..hi).unwrap_or_default();
        lo + window.partition_point(|e| e.cmp_value(a, head, v) == Ordering::Less)
    }
}

/// Runs shorter than this have no filter: a binary search of at most 128
/// KiB of entries mostly hits the CPU's second-level cache, and the
/// binary-counter merges rebuild small runs' filters most often (1,024:
/// 212 instructions per write; 4,096: 151, 133 in one pass without a
/// buffer of hashes; callgrind, 40 k NEXT writes).
const FILTER_MIN: usize = 4096;

/// A blocked Bloom filter of a run's values: one 64-bit word per value,
/// [`FILTER_PROBES`] bits in it, about ten bits per entry of the run. An
/// equality lookup tests it before searching the run: without it, the
/// search's probes (cache misses into a large run) were three quarters of
/// the memtable phase of a NEXT top-10 LOOKUP on the LevelDB++ mix at 1 M
/// tweets (`perf annotate`), in runs that mostly do not hold the value;
/// with filters, 75% of those searches were skipped. Equal values have
/// equal hashes, so a value of the run is never filtered out. Empty: no
/// filter (every value may be present).
#[derive(Default)]
struct ValueFilter {
    words: Vec<u64>,
}

/// Bits set per value in its word.
const FILTER_PROBES: u32 = 4;

impl ValueFilter {
    /// The filter's hash of an encoded value `v` (whose head is `head`):
    /// of its head and length when those are the whole value (at most 8
    /// bytes: no arena read when a filter is built), else of all its bytes.
    fn hash(head: u64, v: &[u8]) -> u64 {
        if v.len() <= 8 {
            return Self::short(head, v.len());
        }
        let mut h = (v.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        for c in v.chunks(8) {
            h = (h ^ head_of(c))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29);
        }
        Self::finish(h)
    }

    /// The hash of a value of at most 8 bytes: its head and length.
    fn short(head: u64, len: usize) -> u64 {
        Self::finish((len as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ head)
    }

    /// MurmurHash3's 64-bit finalizer.
    fn finish(mut h: u64) -> u64 {
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }

    /// [`ValueFilter::hash`] of entry `e`'s value.
    fn hash_of(e: &SideEntry, a: &Arena) -> u64 {
        if e.vlen <= 8 {
            Self::short(e.head, e.vlen as usize)
        } else {
            Self::hash(e.head, e.value(a))
        }
    }

    /// The word of `h` (its high half scaled to the length) and its bits
    /// (six bits of its low half per probe).
    fn slot(&self, h: u64) -> (usize, u64) {
        let word = ((h >> 32) * self.words.len() as u64) >> 32;
        let mut mask = 0u64;
        for i in 0..FILTER_PROBES {
            mask |= 1 << ((h >> (6 * i)) & 63);
        }
        (word as usize, mask)
    }

    /// The filter of `entries`, sorted by value (equal values adjacent,
    /// so each distinct value is hashed in once). Sized by the entries,
    /// an upper bound of the distinct values (at most 10 bits an entry
    /// beside its 32 bytes): one pass, no buffer of hashes.
    fn of(entries: &[SideEntry], a: &Arena) -> ValueFilter {
        let mut f = ValueFilter {
            words: vec![0; (entries.len() * 10).div_ceil(64)],
        };
        let mut prev = None;
        for e in entries {
            let h = Self::hash_of(e, a);
            if prev == Some(h) {
                continue;
            }
            prev = Some(h);
            let (w, mask) = f.slot(h);
            if let Some(word) = f.words.get_mut(w) {
                *word |= mask;
            }
        }
        f
    }

    /// False only if no entry of the filtered run has a value with hash
    /// `h` ([`ValueFilter::hash`]).
    fn may_contain(&self, h: u64) -> bool {
        if self.words.is_empty() {
            return true;
        }
        let (w, mask) = self.slot(h);
        self.words.get(w).is_none_or(|word| word & mask == mask)
    }
}

/// Entries appended before the tail is sorted into a run. Every query
/// scans the tail: 512 cost a NEXT top-10 LOOKUP of the LevelDB++ mix a
/// sixth of its instructions more than 128, which cost a write 33 more
/// (callgrind; 64 saved queries 1% more for 70 more per write).
const TAIL_MAX: usize = 128;

impl SortedRuns {
    /// Inserts the entry of `value` (encoded by `encode`, `vlen` bytes
    /// expected) for `key` at `seq`.
    fn insert(&self, vlen: usize, encode: impl FnOnce(&mut Vec<u8>), key: &[u8], seq: SeqNo) {
        let mut guard = write(&self.state);
        let st = &mut *guard;
        let mut value_len = 0;
        let (chunk, off, len) = st.arena.push(vlen + key.len(), |b| {
            let start = b.len();
            encode(b);
            value_len = b.len() - start;
            b.extend_from_slice(key);
        });
        let vlen = value_len as u32;
        let e = SideEntry {
            head: head_of(st.arena.get(chunk, off, vlen)),
            seq,
            chunk,
            off,
            vlen,
            klen: len - vlen,
        };
        st.tail.push(e);
    }

    /// Sorts the tail into the runs if it holds [`TAIL_MAX`] entries or
    /// more: called by readers that search (a query, the range filter's
    /// bounds), never by the write path, so a write only appends and a
    /// memtable that no query searches is never sorted (its flush takes
    /// the entries by sequence number, [`SortedRuns::for_each`]).
    fn seal(&self) {
        if read(&self.state).tail.len() < TAIL_MAX {
            return;
        }
        let mut guard = write(&self.state);
        let st = &mut *guard;
        if st.tail.len() < TAIL_MAX {
            return;
        }
        let arena = &st.arena;
        let mut run = std::mem::take(&mut st.tail);
        // By head (integers), then each group of equal heads fully: the
        // order of `SideEntry::cmp`, which compares heads first.
        run.sort_unstable_by_key(|e| e.head);
        for group in run.chunk_by_mut(|a, b| a.head == b.head) {
            if group.len() > 1 {
                group.sort_unstable_by(|a, b| a.cmp(b, arena));
            }
        }
        // Merge with the newest runs while they are not twice as large
        // (binary-counter merging: each entry is moved O(log n) times).
        while let Some(last) = st.runs.last() {
            if last.entries.len() > run.len() * 2 {
                break;
            }
            let Some(last) = st.runs.pop() else { break };
            run = merge_sorted(&last.entries, &run, arena);
        }
        st.runs.push(Run::new(run, arena));
        // The tail's allocation was moved into the run.
        st.tail.reserve(TAIL_MAX);
    }

    /// (key, seq) of the entries with `lo <= value <= hi` and `seq <=
    /// snapshot`, in no particular order: every one, or with `limit` the
    /// `limit` newest (see [`Newest`]). Keys are copied only for the
    /// entries returned.
    fn range(&self, lo: &[u8], hi: &[u8], snapshot: SeqNo, limit: Option<usize>) -> Newest {
        use std::cmp::Ordering::{Greater, Less};
        self.seal();
        let st = read(&self.state);
        let a = &st.arena;
        let (lo_head, hi_head) = (head_of(lo), head_of(hi));
        let mut found: Vec<SideEntry> = Vec::new();
        // Some value's versions were cut to `limit` within a run: each one
        // left out is older than `limit` versions kept, so older than the
        // `limit`-th newest of `found` too.
        let mut capped = false;
        // An equality lookup skips the runs whose filter rules its value out.
        let point = (lo == hi).then(|| ValueFilter::hash(lo_head, lo));
        for r in &st.runs {
            let (run, filter) = (&r.entries, &r.filter);
            if point.is_some_and(|h| !filter.may_contain(h)) {
                continue;
            }
            let start = r.lower_bound(a, lo_head, lo);
            debug_assert_eq!(
                start,
                run.partition_point(|e| e.cmp_value(a, lo_head, lo) == Less)
            );
            let rest = run.get(start..).unwrap_or_default();
            // Linear from the start (the matches are adjacent; a second
            // binary search for their end would miss the cache at every
            // probe). With a limit, each value's first `n` visible entries
            // (its entries are newest first), then the rest of the value
            // skipped by a galloping search from there.
            let mut i = 0;
            while let Some(first) = rest.get(i) {
                if first.cmp_value(a, hi_head, hi) == Greater {
                    break;
                }
                let Some(n) = limit else {
                    if first.seq <= snapshot {
                        found.push(*first);
                    }
                    i += 1;
                    continue;
                };
                let (fh, fv) = (first.head, first.value(a));
                let same = |e: &SideEntry| e.cmp_value(a, fh, fv) == Ordering::Equal;
                let mut taken = 0;
                let mut j = i;
                while let Some(e) = rest.get(j) {
                    if j > i && !same(e) {
                        break;
                    }
                    if e.seq <= snapshot {
                        if taken == n {
                            // Older visible versions of the value are left out.
                            capped = true;
                            j = gallop_end(rest, j, same);
                            break;
                        }
                        found.push(*e);
                        taken += 1;
                    }
                    j += 1;
                }
                i = j.max(i + 1);
            }
        }
        for e in &st.tail {
            if e.seq <= snapshot
                && e.cmp_value(a, lo_head, lo) != Less
                && e.cmp_value(a, hi_head, hi) != Greater
            {
                found.push(*e);
            }
        }
        let complete_below = keep_newest(&mut found, |e| e.seq, limit)
            .or_else(|| capped.then(|| found.iter().map(|e| e.seq).min().unwrap_or(SeqNo::MAX)));
        Newest {
            entries: found.iter().map(|e| (e.key(a).to_vec(), e.seq)).collect(),
            complete_below,
        }
    }

    /// The smallest and largest encoded value (`None` when empty).
    fn bounds(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.seal();
        let st = read(&self.state);
        let a = &st.arena;
        let mut out: Option<(&[u8], &[u8])> = None;
        let ends = st
            .runs
            .iter()
            .flat_map(|r| r.entries.first().into_iter().chain(r.entries.last()))
            .chain(st.tail.iter());
        for e in ends {
            let v = e.value(a);
            out = Some(match out {
                None => (v, v),
                Some((lo, hi)) => (lo.min(v), hi.max(v)),
            });
        }
        out.map(|(lo, hi)| (lo.to_vec(), hi.to_vec()))
    }

    /// Number of entries.
    fn len(&self) -> usize {
        let st = read(&self.state);
        st.runs.iter().map(|r| r.entries.len()).sum::<usize>() + st.tail.len()
    }

    /// Calls `f(seq, encoded value)` for every entry.
    fn for_each(&self, mut f: impl FnMut(SeqNo, &[u8])) {
        let st = read(&self.state);
        let a = &st.arena;
        for e in st
            .runs
            .iter()
            .flat_map(|r| r.entries.iter())
            .chain(&st.tail)
        {
            f(e.seq, e.value(a));
        }
    }
}

/// The matching entries of one memtable's side index, or the newest of
/// them.
#[derive(Default)]
pub(crate) struct Newest {
    /// (key, seq), in no particular order.
    pub entries: Vec<(Vec<u8>, SeqNo)>,
    /// `Some(s)` if entries were left out: every matching entry with a
    /// sequence number of at least `s` is in `entries`, older ones may be
    /// missing. `None`: `entries` holds every match.
    pub complete_below: Option<SeqNo>,
}

/// The end of the run of items from `from` on that satisfy `pred`, which
/// holds at `from` and for a prefix of `items[from..]`: doubling steps
/// from `from`, then a binary search inside the last step, so a short run
/// costs a few nearby probes.
fn gallop_end<T>(items: &[T], from: usize, pred: impl Fn(&T) -> bool) -> usize {
    let (mut lo, mut step) = (from, 1usize);
    while items.get(lo + step).is_some_and(&pred) {
        lo += step;
        step = step.saturating_mul(2);
    }
    // `pred` holds at `lo`; the end is in (lo, lo + step].
    let hi = (lo + step).min(items.len());
    lo + 1
        + items
            .get(lo + 1..hi)
            .unwrap_or_default()
            .partition_point(&pred)
}

/// Keeps the `limit` items of `items` with the largest sequence numbers
/// (all without a limit); returns the smallest sequence number kept if
/// any item was dropped (see [`Newest::complete_below`]).
fn keep_newest<T>(
    items: &mut Vec<T>,
    seq: impl Fn(&T) -> SeqNo,
    limit: Option<usize>,
) -> Option<SeqNo> {
    let n = limit?;
    if items.len() <= n {
        return None;
    }
    if n == 0 {
        items.clear();
        return Some(SeqNo::MAX);
    }
    items.select_nth_unstable_by_key(n - 1, |x| std::cmp::Reverse(seq(x)));
    items.truncate(n);
    items.iter().map(seq).min()
}

/// The merge of two sorted runs (ties: `a` first, as their order is total
/// and entries are distinct by sequence number).
fn merge_sorted(a: &[SideEntry], b: &[SideEntry], arena: &Arena) -> Vec<SideEntry> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        let take_a = match x.head.cmp(&y.head) {
            Ordering::Less => true,
            Ordering::Greater => false,
            Ordering::Equal => x.cmp(y, arena) != Ordering::Greater,
        };
        if take_a {
            out.push(*x);
            i += 1;
        } else {
            out.push(*y);
            j += 1;
        }
    }
    out.extend_from_slice(a.get(i..).unwrap_or_default());
    out.extend_from_slice(b.get(j..).unwrap_or_default());
    out
}

/// The indexes attached to a side structure, with their JSON paths.
struct Attached {
    indexes: Vec<(Arc<IndexMeta>, Arc<SideIndex>)>,
    /// The paths of `indexes`: each inserted record is read once.
    fields: Fields,
    /// Each index's slot in `fields` (`None` for a registered extractor),
    /// in the order of `indexes`.
    slots: Vec<Option<usize>>,
}

/// The memtable side structure: each index's values of the memtable's
/// entries (every version; validation picks the live ones). Indexes can be
/// attached while the memtable is active (see `IndexManager::attach`).
///
/// Its bytes are reported apart from the memtable's
/// ([`MemSide::approximate_bytes`]): they do not count toward the memtable
/// budget, so an index does not make flushes more frequent.
pub(crate) struct IndexSide {
    /// Replaced whole on attach. A write holds the read lock for its
    /// insert; a query only while cloning the `Arc`.
    attached: RwLock<Arc<Attached>>,
    bytes: AtomicUsize,
    /// The smallest sequence number added to the memtable (`u64::MAX`
    /// while empty).
    min_seq: AtomicU64,
    /// Readings made by a loader before the write (see `index::preread`).
    pre: Arc<PreReads>,
    /// The memtable's entries of the indexed records, by sequence number.
    records: RwLock<Records>,
}

/// The memtable's entries of the records the side indexed (see
/// `MemSide::on_add`: a name of the skiplist node, not a copy), by
/// sequence number: a query takes a candidate's record from here instead
/// of searching the skiplist for it (two thirds of a NEXT top-10 LOOKUP's
/// time on the LevelDB++ mix, most of it cache misses along the skiplist's
/// levels).
///
/// Invariant: `vals[i]`, if set, is the memtable's entry at sequence
/// number `base + i`, a put. A sequence number without a slot (written
/// before an index was attached, past a gap too wide to fill, or out of
/// order) has no record here and callers search the memtable.
#[derive(Default)]
struct Records {
    base: SeqNo,
    vals: Vec<Option<MemEntry>>,
}

/// Widest run of sequence numbers without a put that [`Records`] fills
/// with empty slots; past it, later entries are not recorded.
const RECORD_GAP_MAX: u64 = 4096;

/// Bytes of one [`Records`] slot (the value's bytes are the memtable's).
const RECORD_SLOT_BYTES: usize = std::mem::size_of::<Option<MemEntry>>();

impl Records {
    fn add(&mut self, seq: SeqNo, value: MemEntry) -> bool {
        if self.vals.is_empty() {
            self.base = seq;
        }
        let Some(i) = seq.checked_sub(self.base) else {
            return false;
        };
        let len = self.vals.len() as u64;
        if i >= len {
            if i - len > RECORD_GAP_MAX {
                return false;
            }
            self.vals.resize(i as usize, None);
            self.vals.push(Some(value));
            return true;
        }
        match self.vals.get_mut(i as usize) {
            Some(slot @ None) => {
                *slot = Some(value);
                true
            }
            _ => false,
        }
    }

    fn get(&self, seq: SeqNo) -> Option<MemEntry> {
        let i = usize::try_from(seq.checked_sub(self.base)?).ok()?;
        *self.vals.get(i)?
    }
}

impl IndexSide {
    pub fn new(pre: Arc<PreReads>) -> IndexSide {
        IndexSide {
            pre,
            attached: RwLock::new(Arc::new(Attached {
                indexes: Vec::new(),
                fields: Fields::new([]),
                slots: Vec::new(),
            })),
            bytes: AtomicUsize::new(0),
            min_seq: AtomicU64::new(u64::MAX),
            records: RwLock::new(Records::default()),
        }
    }

    /// The memtable's entry of its put at `seq`, if this side recorded it
    /// (see [`Records`]).
    pub fn record(&self, seq: SeqNo) -> Option<MemEntry> {
        read(&self.records).get(seq)
    }

    /// The smallest sequence number of the memtable's entries (`None` if
    /// empty): with the memtable's largest, the range of its writes.
    pub fn min_seq(&self) -> Option<SeqNo> {
        Some(self.min_seq.load(Relaxed)).filter(|s| *s != u64::MAX)
    }

    fn current(&self) -> Arc<Attached> {
        read(&self.attached).clone()
    }

    pub fn attach(&self, def: Arc<IndexMeta>) {
        let mut slot = write(&self.attached);
        if slot.indexes.iter().any(|(d, _)| d.id == def.id) {
            return;
        }
        // The skiplists are shared with the `Attached` being replaced, so
        // a writer still holding the old one inserts where queries look.
        let mut indexes = slot.indexes.clone();
        let side = if def.spec.key_type.is_spatial() {
            SideIndex::Spatial(RwLock::new(SpatialEntries::default()))
        } else {
            SideIndex::Scalar(SortedRuns::default())
        };
        indexes.push((def, Arc::new(side)));
        let fields = fields_of(indexes.iter().map(|(d, _)| &**d));
        let slots = indexes
            .iter()
            .map(|(d, _)| d.needs_json().then(|| fields.slot(&d.path)).flatten())
            .collect();
        *slot = Arc::new(Attached {
            indexes,
            fields,
            slots,
        });
    }

    /// Index `id`'s values of this memtable's entries by sequence number,
    /// encoded, for the flush of the memtable (`None` if `id` is not
    /// attached): every version in the memtable has its own sequence
    /// number, so the sequence number alone names the entry (no key
    /// comparison, no sort by key). Entries absent were not indexed here
    /// (no attribute, or written before `id` was attached): the flush
    /// reads them itself.
    pub fn values_by_seq(&self, id: u32) -> Option<StoredValues> {
        let att = self.current();
        let (meta, side) = att.indexes.iter().find(|(d, _)| d.id == id)?;
        // No budget: the values are already in memory, in the side index.
        let mut out = StoredBuilder::new(meta.spec.key_type, usize::MAX);
        match &**side {
            SideIndex::Scalar(s) => {
                out.reserve(s.len());
                let mut full = false;
                s.for_each(|seq, value| {
                    // `push` refuses only beyond 2^32 values; the rest
                    // are then read from their records.
                    full = full || !out.push(seq, value);
                })
            }
            SideIndex::Spatial(s) => {
                let mut enc = Vec::with_capacity(32);
                let s = read(s);
                out.reserve(s.entries.len());
                for e in s.entries.iter() {
                    enc.clear();
                    e.value.encode_into(&mut enc);
                    if !out.push(e.seq, &enc) {
                        break;
                    }
                }
            }
        }
        Some(out.finish())
    }

    /// The range of index `id`'s values in this memtable (every version):
    /// the memtable's range filter, computed when asked (`filter`).
    /// `None` if nothing is indexed here.
    pub fn bounds(&self, id: u32) -> Option<SideBounds> {
        let att = self.current();
        let (_, side) = att.indexes.iter().find(|(d, _)| d.id == id)?;
        match &**side {
            SideIndex::Scalar(s) => s.bounds().map(|(lo, hi)| SideBounds::Scalar(lo, hi)),
            SideIndex::Spatial(s) => {
                let mut out: Option<[f64; 4]> = None;
                for e in read(s).entries.iter() {
                    let Some(m) = e.value.mbr() else { continue };
                    out = Some(match out {
                        None => m,
                        Some(r) => [
                            r[0].min(m[0]),
                            r[1].min(m[1]),
                            r[2].max(m[2]),
                            r[3].max(m[3]),
                        ],
                    });
                }
                out.map(SideBounds::Rect)
            }
        }
    }

    /// Index `id`'s entries matching `pred` with `seq <= snapshot`, or the
    /// `limit` newest of them.
    pub fn query(
        &self,
        id: u32,
        pred: &Predicate,
        snapshot: SeqNo,
        limit: Option<usize>,
    ) -> Newest {
        let att = self.current();
        let Some((_, side)) = att.indexes.iter().find(|(d, _)| d.id == id) else {
            return Newest::default();
        };
        match &**side {
            SideIndex::Scalar(s) => {
                let Some((lo, hi)) = pred.scalar_bounds() else {
                    return Newest::default();
                };
                s.range(&lo, &hi, snapshot, limit)
            }
            SideIndex::Spatial(s) => {
                let s = read(s);
                let mut found: Vec<&SpatialEntry> = s
                    .entries
                    .iter()
                    .filter(|e| e.seq <= snapshot && pred.matches(&e.value))
                    .collect();
                let complete_below = keep_newest(&mut found, |e| e.seq, limit);
                Newest {
                    entries: found
                        .iter()
                        .map(|e| (e.key(&s.keys).to_vec(), e.seq))
                        .collect(),
                    complete_below,
                }
            }
        }
    }
}

impl MemSide for IndexSide {
    fn on_add(&self, seq: SeqNo, kind: ValueKind, user_key: &[u8], value: &[u8], entry: MemEntry) {
        self.min_seq.fetch_min(seq, Relaxed);
        if kind != ValueKind::Value {
            return;
        }
        // Held for the insert (an attach, which writes, happens while
        // writes are paused): no reference count taken per write.
        let att = read(&self.attached);
        if att.indexes.is_empty() {
            return;
        }
        // This write's bytes, added to `bytes` once.
        let mut bytes = 0;
        if write(&self.records).add(seq, entry) {
            bytes += RECORD_SLOT_BYTES;
        }
        // The loader's reading of these bytes if it registered one, else
        // one reading for every attached index.
        let pre = self.pre.take(value);
        let own = match pre {
            Some(_) => None,
            None => read_doc(value, &att.fields),
        };
        let doc = match &pre {
            Some((fields, read)) => Some(Doc { fields, read }),
            None => Doc::of(&att.fields, &own),
        };
        for ((d, side), slot) in att.indexes.iter().zip(&att.slots) {
            // From this side's own reading at the slot found at attach
            // (what `IndexMeta::extract` looks up by path); a loader's
            // reading or a registered extractor through `extract`.
            let got = match (&own, slot) {
                (Some(read), Some(s)) => d.value_at(read, *s),
                _ => d.extract(value, doc),
            };
            match got {
                Ok(v) => {
                    d.counters.indexed.fetch_add(1, Relaxed);
                    bytes += user_key.len() + 64;
                    match &**side {
                        SideIndex::Scalar(s) => {
                            s.insert(v.encoded_len(), |b| v.encode_into(b), user_key, seq);
                        }
                        SideIndex::Spatial(s) => {
                            let mut s = write(s);
                            let (chunk, off, klen) = s
                                .keys
                                .push(user_key.len(), |b| b.extend_from_slice(user_key));
                            s.entries.push(SpatialEntry {
                                chunk,
                                off,
                                klen,
                                seq,
                                value: v,
                            });
                        }
                    }
                }
                Err(skip) => d.count_skip(skip),
            }
        }
        self.bytes.fetch_add(bytes, Relaxed);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn approximate_bytes(&self) -> usize {
        self.bytes.load(Relaxed)
    }
}

/// The range of one index's values in a memtable ([`IndexSide::bounds`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum SideBounds {
    /// Encoded `[min, max]` of scalar values.
    Scalar(Vec<u8>, Vec<u8>),
    /// Bounding rectangle of points or rectangles.
    Rect([f64; 4]),
}

/// `side` as this module's side structure (`None` for another kind).
pub(crate) fn of(side: Option<&Arc<dyn MemSide>>) -> Option<&IndexSide> {
    side.and_then(|s| s.as_any().downcast_ref::<IndexSide>())
}

/// The range of index `id`'s values in `mem` (see [`IndexSide::bounds`]).
pub(crate) fn bounds(mem: &strata_lsm::memtable::MemTable, id: u32) -> Option<SideBounds> {
    of(mem.side()).and_then(|s| s.bounds(id))
}

/// The value of `mem`'s put at `seq`, if its side structure recorded it
/// (see [`Records`]); `None`: search the memtable.
pub(crate) fn record(mem: &strata_lsm::memtable::MemTable, seq: SeqNo) -> Option<&[u8]> {
    of(mem.side())
        .and_then(|s| s.record(seq))
        .and_then(|e| mem.value_of(e))
}

/// The entries of index `id` in `mem`'s side structure matching `pred`:
/// (key, seq) of every version, newest or not.
pub(crate) fn candidates(
    mem: &strata_lsm::memtable::MemTable,
    id: u32,
    pred: &Predicate,
) -> Vec<(Vec<u8>, SeqNo)> {
    newest_candidates(mem, id, pred, SeqNo::MAX, None).entries
}

/// [`candidates`] with `seq <= snapshot`, or (with `limit`) the `limit`
/// newest of them: a top-K query copies the keys it may use, not every
/// version of a popular value.
pub(crate) fn newest_candidates(
    mem: &strata_lsm::memtable::MemTable,
    id: u32,
    pred: &Predicate,
    snapshot: SeqNo,
    limit: Option<usize>,
) -> Newest {
    of(mem.side())
        .map(|s| s.query(id, pred, snapshot, limit))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_runs_give_the_newest_matches_of_a_range() {
        let runs = SortedRuns::default();
        let mut model: Vec<(u64, Vec<u8>, SeqNo)> = Vec::new();
        let mut x: u64 = 99;
        for seq in 1..=5_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Few values (many versions of each), 8-byte and longer ones.
            let v = x % 12;
            let enc: Vec<u8> = if v.is_multiple_of(3) {
                format!("long-value-{v}").into_bytes()
            } else {
                v.to_be_bytes().to_vec()
            };
            let k = format!("k{}", x % 700).into_bytes();
            runs.insert(enc.len(), |b| b.extend_from_slice(&enc), &k, seq);
            model.push((v, k, seq));
        }
        let enc = |v: u64| -> Vec<u8> {
            if v.is_multiple_of(3) {
                format!("long-value-{v}").into_bytes()
            } else {
                v.to_be_bytes().to_vec()
            }
        };
        for (lo, hi) in [(4u64, 4u64), (1, 2), (3, 3), (0, 11)] {
            let (el, eh) = (enc(lo), enc(hi));
            for snapshot in [5_000, 2_500, 10] {
                for limit in [None, Some(0), Some(1), Some(7), Some(100), Some(10_000)] {
                    let got = runs.range(&el, &eh, snapshot, limit);
                    let mut want: Vec<(Vec<u8>, SeqNo)> = model
                        .iter()
                        .filter(|(v, _, s)| {
                            let e = enc(*v);
                            *s <= snapshot && e >= el && e <= eh
                        })
                        .map(|(_, k, s)| (k.clone(), *s))
                        .collect();
                    want.sort_by_key(|w| std::cmp::Reverse(w.1));
                    let all = want.len();
                    if let Some(n) = limit {
                        want.truncate(n);
                    }
                    let mut g = got.entries.clone();
                    g.sort_by_key(|w| std::cmp::Reverse(w.1));
                    assert_eq!(g, want, "{lo}..={hi} at {snapshot}, limit {limit:?}");
                    let cut = limit.is_some_and(|n| n < all);
                    assert_eq!(got.complete_below.is_some(), cut);
                    if let (Some(s), Some(last)) = (got.complete_below, want.last()) {
                        assert_eq!(s, last.1);
                    }
                }
            }
        }
    }

    /// A run's filter keeps every value of the run (long values and
    /// values that are prefixes of others included) and rules out most
    /// others (about ten bits per entry, here three entries a value).
    #[test]
    fn value_filter_has_no_false_negatives_and_few_false_positives() {
        let runs = SortedRuns::default();
        let value = |i: u64| -> Vec<u8> {
            match i % 3 {
                0 => (i * 7919).to_be_bytes().to_vec(),
                1 => (i * 7919).to_be_bytes()[3..].to_vec(),
                _ => format!("user-{i:012}").into_bytes(),
            }
        };
        // Each value three times (versions), so distinct < entries.
        let mut seq = 0;
        for _ in 0..3 {
            for i in 0..3000u64 {
                let v = value(i);
                runs.insert(v.len(), |b| b.extend_from_slice(&v), b"k", seq);
                seq += 1;
            }
        }
        runs.seal();
        let st = read(&runs.state);
        let run = st.runs.first().expect("a run");
        assert!(run.entries.len() >= 4096 && !run.filter.words.is_empty());
        let contains = |v: &[u8]| run.filter.may_contain(ValueFilter::hash(head_of(v), v));
        let a = &st.arena;
        for e in &run.entries {
            assert!(contains(e.value(a)));
        }
        let fp = (10_000..30_000u64).filter(|&i| contains(&value(i))).count();
        assert!(fp < 20_000 / 10, "{fp} false positives in 20000");
    }

    /// Inserts only append; the first search sorts everything appended
    /// into runs, and finds every match, including those inserted after.
    #[test]
    fn inserts_append_and_the_first_search_sorts() {
        let runs = SortedRuns::default();
        for seq in 0..1000u64 {
            let v = (seq % 50).to_be_bytes();
            runs.insert(8, |b| b.extend_from_slice(&v), b"k", seq);
        }
        {
            let st = read(&runs.state);
            assert!(st.runs.is_empty());
            assert_eq!(st.tail.len(), 1000);
        }
        let v = 7u64.to_be_bytes();
        assert_eq!(runs.range(&v, &v, SeqNo::MAX, None).entries.len(), 20);
        {
            let st = read(&runs.state);
            assert!(st.tail.is_empty());
            assert_eq!(st.runs.iter().map(|r| r.entries.len()).sum::<usize>(), 1000);
        }
        runs.insert(8, |b| b.extend_from_slice(&v), b"k", 1000);
        assert_eq!(runs.range(&v, &v, SeqNo::MAX, None).entries.len(), 21);
        assert_eq!(runs.len(), 1001);
    }

    #[test]
    fn gallop_end_finds_the_end_of_a_prefix() {
        let items: Vec<u32> = (0..100).collect();
        for from in [0usize, 1, 5, 50, 99] {
            for end in from + 1..=100 {
                let got = gallop_end(&items, from, |x| (*x as usize) < end);
                assert_eq!(got, end, "from {from}, end {end}");
            }
        }
    }

    #[test]
    fn keep_newest_keeps_the_largest_sequence_numbers() {
        let mut v: Vec<SeqNo> = vec![5, 9, 1, 7, 3];
        assert_eq!(keep_newest(&mut v, |s| *s, None), None);
        assert_eq!(v.len(), 5);
        assert_eq!(keep_newest(&mut v, |s| *s, Some(5)), None);
        assert_eq!(keep_newest(&mut v, |s| *s, Some(2)), Some(7));
        v.sort_unstable();
        assert_eq!(v, vec![7, 9]);
        assert_eq!(keep_newest(&mut v, |s| *s, Some(0)), Some(SeqNo::MAX));
        assert!(v.is_empty());
    }

    #[test]
    fn short_values_compare_by_head_and_length() {
        let mut a = Arena::default();
        let mut entry = |v: &[u8]| {
            let (chunk, off, len) = a.push(v.len(), |b| b.extend_from_slice(v));
            SideEntry {
                head: head_of(v),
                seq: 0,
                chunk,
                off,
                vlen: len,
                klen: 0,
            }
        };
        let vals: [&[u8]; 7] = [
            b"",
            b"\0",
            b"\0\0",
            b"a",
            b"a\0",
            b"abcdefgh",
            b"abcdefgh\0",
        ];
        let es: Vec<SideEntry> = vals.iter().map(|v| entry(v)).collect();
        for (e, x) in es.iter().zip(vals) {
            for y in vals {
                assert_eq!(e.cmp_value(&a, head_of(y), y), x.cmp(y), "{x:?} vs {y:?}");
            }
        }
    }

    #[test]
    fn records_hold_each_recorded_value_by_sequence_number() {
        let mem = strata_lsm::memtable::MemTable::new(1);
        let mut n = 0;
        let mut v = |s: &str| {
            n += 1;
            mem.add(n, ValueKind::Value, b"k", s.as_bytes())
        };
        let mut r = Records::default();
        assert!(r.get(5).is_none());
        assert!(r.add(10, v("a")));
        // A small gap is filled with empty slots; an old or taken slot is
        // refused; a gap wider than RECORD_GAP_MAX is not recorded.
        assert!(r.add(13, v("b")));
        assert!(!r.add(9, v("old")));
        assert!(!r.add(13, v("again")));
        assert!(r.add(11, v("c")));
        assert!(!r.add(14 + RECORD_GAP_MAX + 1, v("far")));
        assert!(r.add(14 + RECORD_GAP_MAX, v("edge")));
        let got = |s: SeqNo| r.get(s).and_then(|e| mem.value_of(e)).map(|x| x.to_vec());
        assert_eq!(got(10), Some(b"a".to_vec()));
        assert_eq!(got(11), Some(b"c".to_vec()));
        assert_eq!(got(12), None);
        assert_eq!(got(13), Some(b"b".to_vec()));
        assert_eq!(got(9), None);
        assert_eq!(got(14 + RECORD_GAP_MAX), Some(b"edge".to_vec()));
        assert_eq!(got(15 + RECORD_GAP_MAX), None);
        assert_eq!(got(u64::MAX), None);
        // An entry of another memtable is not read through this one.
        let other = strata_lsm::memtable::MemTable::new(2);
        let e = other.add(1, ValueKind::Value, b"k", b"elsewhere");
        assert!(mem.value_of(e).is_none());
        assert_eq!(other.value_of(e), Some(&b"elsewhere"[..]));
    }

    #[test]
    fn sorted_runs_answer_like_an_ordered_set() {
        let runs = SortedRuns::default();
        let mut model = std::collections::BTreeSet::new();
        let mut x: u64 = 12345;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for i in 0..20_000u64 {
            // Values of 1 to 9 bytes: prefixes of each other and equal
            // heads with different tails are compared as bytes.
            let n = 1 + (next() % 9) as usize;
            let v = (next() % 3000).to_be_bytes();
            let v: Vec<u8> = v.iter().chain(&[0u8, 7]).skip(10 - n).copied().collect();
            let k = format!("k{}", next() % 500).into_bytes();
            runs.insert(v.len(), |b| b.extend_from_slice(&v), &k, i);
            model.insert((v, k, i));
            if i % 997 == 0 {
                runs.seal();
                let st = read(&runs.state);
                for w in st.runs.windows(2) {
                    assert!(w[1].entries.len() * 2 < w[0].entries.len(), "run sizes");
                }
                let a = &st.arena;
                assert!(st.runs.iter().all(|r| r
                    .entries
                    .windows(2)
                    .all(|w| w[0].cmp(&w[1], a) == Ordering::Less)));
                assert!(st.tail.len() < TAIL_MAX);
            }
            if i % 101 == 0 {
                let a = next() % 3000;
                let b = a + next() % 200;
                let (lo, hi) = (a.to_be_bytes().to_vec(), b.to_be_bytes().to_vec());
                let mut got = runs.range(&lo, &hi, SeqNo::MAX, None).entries;
                got.sort();
                let mut want: Vec<(Vec<u8>, SeqNo)> = model
                    .iter()
                    .filter(|e| e.0 >= lo && e.0 <= hi)
                    .map(|e| (e.1.clone(), e.2))
                    .collect();
                want.sort();
                assert_eq!(got, want, "range {a}..={b} after {i}");
                // Equality lookups (the runs' filters): a value inserted
                // earlier, of any length, and one that may not be.
                let old = model.iter().nth((next() % model.len() as u64) as usize);
                let absent = (next() % 4000).to_be_bytes().to_vec();
                for v in old.map(|e| e.0.clone()).into_iter().chain([absent]) {
                    let mut got = runs.range(&v, &v, SeqNo::MAX, None).entries;
                    got.sort();
                    let mut want: Vec<(Vec<u8>, SeqNo)> = model
                        .iter()
                        .filter(|e| e.0 == v)
                        .map(|e| (e.1.clone(), e.2))
                        .collect();
                    want.sort();
                    assert_eq!(got, want, "value {v:?} after {i}");
                }
            }
        }
        let mut all = Vec::new();
        {
            let st = read(&runs.state);
            let a = &st.arena;
            for e in st.runs.iter().flat_map(|r| &r.entries).chain(&st.tail) {
                all.push((e.value(a).to_vec(), e.key(a).to_vec(), e.seq));
            }
        }
        all.sort();
        assert_eq!(all, model.into_iter().collect::<Vec<_>>());
    }
}
