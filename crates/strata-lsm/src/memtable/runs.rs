//! Runs mode of the memtable: a small skiplist in front of sorted runs.
//!
//! A skiplist written at random keys spends most of an insert on cache
//! misses in its lower levels once it is large: 1.7 µs an insert of a
//! random 16-byte key into a list of 1 M entries, 0.3 µs into lists of
//! 32 k (`docs/benchmarks.md`, session 39). In runs mode the memtable
//! inserts into a small skiplist (the *active list*) and, once that holds
//! `run_entries` entries, seals it into an immutable sorted array (a
//! *run*). A new run absorbs every run not longer than itself, newest
//! first (a binary counter), so an entry is copied about
//! log2(n / run_entries) times, each time sequentially, and a memtable of
//! n entries has at most that many runs plus the active list. This is an
//! LSM tree inside the memtable, for trees whose writes are blind and
//! whose reads are ranges (the stand-alone index trees).
//!
//! Invariants:
//! - (R1) entries are inserted in increasing sequence order, so every
//!   entry of a newer layer (the active list, then runs newest first) has
//!   a larger sequence number than every entry of an older one: the first
//!   layer holding a visible version of a key holds the newest;
//! - (R2) a published [`Layers`] never changes except by inserts into its
//!   active list (by the one writer); sealing and merging publish new
//!   layers, and readers keep the layers they took alive by an `Arc`;
//! - (R3) every entry is in exactly one layer of the current layers.
//!
//! Sealing and merging run in the writer's thread, inside the insert that
//! fills the active list: that insert takes a few milliseconds when runs
//! of many entries merge (amortized, an entry's copies cost less than one
//! cache miss of the large list's search).

use std::cmp::Ordering;
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, RwLock};

use super::skiplist::{head_of, RawEntry, SkipList, Target};
use crate::iter::InternalIterator;
use crate::key;
use crate::sync::{read, write};

/// An immutable sorted array of entries (internal key and value), in
/// internal-key order, all keys distinct.
pub(super) struct Run {
    /// Each entry's user-key head ([`head_of`], as one number): a search
    /// compares these first and reads the key only on a tie.
    heads: Vec<u128>,
    /// Entry `i` spans `data[offs[i]..offs[i + 1]]`: its internal key
    /// (`klens[i]` bytes), then its value. `offs` has one more element
    /// than there are entries.
    offs: Vec<usize>,
    klens: Vec<u32>,
    data: Vec<u8>,
}

impl Run {
    fn with_capacity(entries: usize, bytes: usize) -> Run {
        let mut offs = Vec::with_capacity(entries + 1);
        offs.push(0);
        Run {
            heads: Vec::with_capacity(entries),
            offs,
            klens: Vec::with_capacity(entries),
            data: Vec::with_capacity(bytes),
        }
    }

    /// Appends an entry (greater than every entry already in).
    fn push(&mut self, head: u128, ikey: &[u8], value: &[u8]) {
        self.heads.push(head);
        self.klens.push(ikey.len() as u32);
        self.data.extend_from_slice(ikey);
        self.data.extend_from_slice(value);
        self.offs.push(self.data.len());
    }

    /// Appends entry `i` of `other`.
    fn push_from(&mut self, other: &Run, i: usize) {
        let (k, v) = other.entry(i);
        self.push(other.head(i), k, v);
    }

    /// Entries.
    pub(super) fn len(&self) -> usize {
        self.heads.len()
    }

    /// Bytes of keys and values.
    fn data_bytes(&self) -> usize {
        self.data.len()
    }

    fn head(&self, i: usize) -> u128 {
        self.heads.get(i).copied().unwrap_or(u128::MAX)
    }

    /// Entry `i`'s internal key and value (empty past the end).
    fn entry(&self, i: usize) -> (&[u8], &[u8]) {
        let (Some(&start), Some(&end), Some(&klen)) =
            (self.offs.get(i), self.offs.get(i + 1), self.klens.get(i))
        else {
            return (&[], &[]);
        };
        let bytes = self.data.get(start..end).unwrap_or_default();
        bytes.split_at(bytes.len().min(klen as usize))
    }

    fn key(&self, i: usize) -> &[u8] {
        self.entry(i).0
    }

    /// How entry `i` orders against `t` ([`key::compare_internal`]).
    fn cmp_target(&self, i: usize, head: u128, t_user: &[u8], t_trailer: u64) -> Ordering {
        match self.head(i).cmp(&head) {
            Ordering::Equal => {
                let k = self.key(i);
                match key::user_key(k).cmp(t_user) {
                    Ordering::Equal => t_trailer.cmp(&key::trailer(k)),
                    o => o,
                }
            }
            o => o,
        }
    }

    /// The first entry at or after `user_key ‖ trailer` (`len()` if none).
    fn lower_bound(&self, user_key: &[u8], trailer: u64) -> usize {
        let head = head_wide(user_key);
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.cmp_target(mid, head, user_key, trailer) == Ordering::Less {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The entries of `list`, in order (the list no longer written).
    fn from_list(list: &SkipList) -> Run {
        let mut run = Run::with_capacity(list.len(), 0);
        let mut e = list.first();
        while let Some(cur) = e {
            let k = cur.key();
            run.push(head_wide(key::user_key(k)), k, cur.value());
            e = cur.next();
        }
        run
    }

    /// The union of two runs (their keys distinct).
    fn merge(a: &Run, b: &Run) -> Run {
        let mut out = Run::with_capacity(a.len() + b.len(), a.data_bytes() + b.data_bytes());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let o = match a.head(i).cmp(&b.head(j)) {
                Ordering::Equal => key::compare_internal(a.key(i), b.key(j)),
                o => o,
            };
            if o == Ordering::Greater {
                out.push_from(b, j);
                j += 1;
            } else {
                out.push_from(a, i);
                i += 1;
            }
        }
        for i in i..a.len() {
            out.push_from(a, i);
        }
        for j in j..b.len() {
            out.push_from(b, j);
        }
        out
    }
}

/// A user key's head as one number ordered as the keys' bytes.
fn head_wide(user_key: &[u8]) -> u128 {
    head_of(user_key).wide()
}

/// What readers see: the active list and the runs, newest first.
pub(super) struct Layers {
    active: SkipList,
    runs: Vec<Arc<Run>>,
}

/// The memtable's entries in runs mode (see the module documentation).
pub(super) struct RunStore {
    /// Entries the active list holds before it is sealed (at least 1).
    run_entries: usize,
    layers: RwLock<Arc<Layers>>,
    len: AtomicUsize,
}

impl RunStore {
    pub(super) fn new(run_entries: usize) -> RunStore {
        RunStore {
            run_entries: run_entries.max(1),
            layers: RwLock::new(Arc::new(Layers {
                active: SkipList::new(),
                runs: Vec::new(),
            })),
            len: AtomicUsize::new(0),
        }
    }

    /// The current layers, kept alive for the caller.
    fn layers(&self) -> Arc<Layers> {
        read(&self.layers).clone()
    }

    /// Entries inserted.
    pub(super) fn len(&self) -> usize {
        self.len.load(AtomicOrdering::Acquire)
    }

    /// Runs (not counting the active list), for tests and statistics.
    pub(super) fn runs(&self) -> usize {
        read(&self.layers).runs.len()
    }

    /// Inserts `user_key ‖ trailer` with `value` (one writer at a time;
    /// sequence numbers increasing, R1); seals the active list when it is
    /// full. The entry returned names a node of the active list, which a
    /// seal frees once no reader holds it: nothing may read it back.
    pub(super) fn insert(&self, user_key: &[u8], trailer: u64, value: &[u8]) -> RawEntry {
        let (raw, full) = {
            let l = read(&self.layers);
            let raw = l.active.insert_next(user_key, trailer, value).0;
            (raw, l.active.len() >= self.run_entries)
        };
        self.len.fetch_add(1, AtomicOrdering::Release);
        if full {
            self.seal();
        }
        raw
    }

    /// Turns the active list into a run, merged with every newer run not
    /// longer than it, and publishes the new layers with an empty list.
    /// Only the writer calls it (so the layers do not change meanwhile).
    fn seal(&self) {
        let cur = self.layers();
        let mut run = Run::from_list(&cur.active);
        let mut older = cur.runs.iter().peekable();
        while let Some(r) = older.next_if(|r| r.len() <= run.len()) {
            run = Run::merge(&run, r);
        }
        let mut runs = Vec::with_capacity(cur.runs.len() + 1);
        runs.push(Arc::new(run));
        runs.extend(older.cloned());
        *write(&self.layers) = Arc::new(Layers {
            active: SkipList::new(),
            runs,
        });
    }

    /// `f` of the newest entry of `user_key` with a trailer at most
    /// `trailer` (its internal key and value), from the newest layer that
    /// holds one (R1).
    pub(super) fn newest<T>(
        &self,
        user_key: &[u8],
        trailer: u64,
        f: impl FnOnce(&[u8], &[u8]) -> T,
    ) -> Option<T> {
        let l = self.layers();
        let t = Target::new(user_key, trailer);
        if let Some(e) = l.active.lower_bound(&t) {
            if key::user_key(e.key()) == user_key {
                return Some(f(e.key(), e.value()));
            }
        }
        for run in &l.runs {
            let i = run.lower_bound(user_key, trailer);
            if i < run.len() {
                let (k, v) = run.entry(i);
                if key::user_key(k) == user_key {
                    return Some(f(k, v));
                }
            }
        }
        None
    }

    /// A cursor over every layer, merged.
    pub(super) fn iter(&self) -> RunsIter {
        let layers = self.layers();
        let pos = vec![usize::MAX; layers.runs.len()];
        RunsIter {
            layers,
            list: None,
            pos,
            cur: None,
        }
    }
}

/// Which layer a [`RunsIter`] is on.
#[derive(Clone, Copy)]
enum Source {
    List,
    Run(usize),
}

/// A cursor over the layers taken when it was made, merged in
/// internal-key order (keys are distinct across layers, R3). A step
/// compares the layers' current keys in place (a handful of layers), with
/// no copy.
pub(super) struct RunsIter {
    layers: Arc<Layers>,
    /// The active list's entry (a node of `layers.active`).
    list: Option<RawEntry>,
    /// Each run's position (`len()` or more: exhausted).
    pos: Vec<usize>,
    cur: Option<Source>,
}

impl RunsIter {
    /// The current entry (internal key, value) of layer `s`, if any.
    fn entry_of(&self, s: Source) -> Option<(&[u8], &[u8])> {
        match s {
            Source::List => self
                .list
                .and_then(|e| e.get(&self.layers.active))
                .map(|e| (e.key(), e.value())),
            Source::Run(r) => {
                let (run, &i) = (self.layers.runs.get(r)?, self.pos.get(r)?);
                (i < run.len()).then(|| run.entry(i))
            }
        }
    }

    /// Sets `cur` to the layer with the least current key.
    fn pick(&mut self) {
        let mut best: Option<(Source, &[u8])> = None;
        let sources =
            std::iter::once(Source::List).chain((0..self.layers.runs.len()).map(Source::Run));
        for s in sources {
            if let Some((k, _)) = self.entry_of(s) {
                if best.is_none_or(|(_, b)| key::compare_internal(k, b) == Ordering::Less) {
                    best = Some((s, k));
                }
            }
        }
        self.cur = best.map(|(s, _)| s);
    }

    fn current(&self) -> (&[u8], &[u8]) {
        self.cur
            .and_then(|s| self.entry_of(s))
            .unwrap_or((&[], &[]))
    }

    /// Visits every entry in order.
    pub(super) fn for_each(
        mut self,
        mut f: impl FnMut(&[u8], &[u8]) -> crate::Result<()>,
    ) -> crate::Result<()> {
        self.seek_to_first()?;
        while self.valid() {
            let (k, v) = self.current();
            f(k, v)?;
            self.next()?;
        }
        Ok(())
    }
}

impl InternalIterator for RunsIter {
    fn valid(&self) -> bool {
        self.cur.is_some()
    }
    fn seek_to_first(&mut self) -> crate::Result<()> {
        self.list = self.layers.active.first().map(|e| e.raw());
        self.pos.iter_mut().for_each(|p| *p = 0);
        self.pick();
        Ok(())
    }
    fn seek(&mut self, target: &[u8]) -> crate::Result<()> {
        let t = Target::from_internal(target);
        self.list = self.layers.active.lower_bound(&t).map(|e| e.raw());
        let (user, trailer) = (key::user_key(target), key::trailer(target));
        for (p, run) in self.pos.iter_mut().zip(&self.layers.runs) {
            *p = run.lower_bound(user, trailer);
        }
        self.pick();
        Ok(())
    }
    fn next(&mut self) -> crate::Result<()> {
        match self.cur {
            Some(Source::List) => {
                self.list = self
                    .list
                    .and_then(|e| e.get(&self.layers.active))
                    .and_then(|e| e.next())
                    .map(|e| e.raw());
            }
            Some(Source::Run(r)) => {
                if let Some(p) = self.pos.get_mut(r) {
                    *p += 1;
                }
            }
            None => return Ok(()),
        }
        self.pick();
        Ok(())
    }
    fn key(&self) -> &[u8] {
        self.current().0
    }
    fn value(&self) -> &[u8] {
        self.current().1
    }
}

#[cfg(test)]
mod tests {
    use super::super::skiplist::tests::xorshift;
    use super::*;
    use crate::key::{pack_trailer, ValueKind};

    /// Every run stays sorted and the binary counter keeps runs few:
    /// after n inserts of run_entries r, at most log2(n / r) + 1 runs.
    #[test]
    fn runs_stay_sorted_and_few() {
        let store = RunStore::new(8);
        let mut rnd = xorshift(7);
        for seq in 1..=1000u64 {
            let k = (rnd() % 500).to_be_bytes();
            store.insert(&k, pack_trailer(seq, ValueKind::Value), &seq.to_le_bytes());
        }
        let l = store.layers();
        assert!(l.runs.len() <= 8, "{} runs", l.runs.len());
        let total: usize = l.runs.iter().map(|r| r.len()).sum::<usize>() + l.active.len();
        assert_eq!(total, 1000);
        for run in &l.runs {
            for i in 1..run.len() {
                assert_eq!(
                    key::compare_internal(run.key(i - 1), run.key(i)),
                    Ordering::Less
                );
            }
        }
        // Older runs are longer (the binary counter).
        assert!(l.runs.windows(2).all(|w| w[0].len() < w[1].len()));
    }
}
