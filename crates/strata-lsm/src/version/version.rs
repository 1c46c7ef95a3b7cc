use std::collections::BTreeMap;
use std::sync::Arc;

use crate::cache::TableCache;
use crate::error::{Error, Result};
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo};
use crate::sstable::{Found, TableIter};
use crate::stats::ReadPurpose;
use crate::version::ext::ExtState;
use crate::version::{FileMetaData, ReleaseSignal, VersionEdit};

/// An immutable snapshot of the LSM shape.
///
/// Invariants: L0 files are ordered newest first (by largest sequence
/// number) and may overlap; every level ≥ 1 is sorted by smallest key and
/// its files' user-key ranges are disjoint.
#[derive(Clone, Default)]
pub struct Version {
    /// Live tables, per level (see the ordering invariants above).
    pub levels: Vec<Vec<Arc<FileMetaData>>>,
    /// Extension state installed with this version (see `hooks`).
    pub ext: BTreeMap<String, ExtState>,
    /// Raised when this version (or a copy) is dropped: its files may have
    /// become obsolete. Set by the version set on every version it hands
    /// out; copies and versions derived by `apply` inherit it.
    pub(crate) release: Option<Arc<ReleaseSignal>>,
    /// A file whose largest user key is the greatest of all `levels`
    /// (`None` without files; always one of `levels`' own files): a key
    /// above it is in no table, which [`Version::files_for_key`] and
    /// [`Version::get`] answer without a level walk (the existence check
    /// of every write of ascending keys). Kept by `apply`, the only way
    /// `levels` changes.
    top: Option<Arc<FileMetaData>>,
}

impl Drop for Version {
    fn drop(&mut self) {
        if let Some(s) = &self.release {
            s.raise();
        }
    }
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_map();
        for (i, l) in self.levels.iter().enumerate() {
            d.entry(&i, &l.iter().map(|f| f.number).collect::<Vec<_>>());
        }
        d.finish()
    }
}

fn smallest_user(f: &FileMetaData) -> &[u8] {
    key::user_key(&f.smallest)
}

fn largest_user(f: &FileMetaData) -> &[u8] {
    key::user_key(&f.largest)
}

impl Version {
    /// An empty version with `num_levels` levels.
    pub fn new(num_levels: usize) -> Version {
        Version {
            levels: vec![Vec::new(); num_levels],
            ext: BTreeMap::new(),
            release: None,
            top: None,
        }
    }

    /// The version after applying `edit`. Fails with `Corruption` if the
    /// edit removes a file that is not there or breaks the level ordering.
    pub fn apply(&self, edit: &VersionEdit) -> Result<Version> {
        let mut v = self.clone();
        for &(level, number) in &edit.deleted_files {
            let files = v
                .levels
                .get_mut(level)
                .ok_or_else(|| Error::corruption(format!("edit deletes file at level {level}")))?;
            let before = files.len();
            files.retain(|f| f.number != number);
            if files.len() == before {
                return Err(Error::corruption(format!(
                    "edit deletes file {number} which is not at level {level}"
                )));
            }
        }
        for (level, f) in &edit.new_files {
            let files = v
                .levels
                .get_mut(*level)
                .ok_or_else(|| Error::corruption(format!("edit adds file at level {level}")))?;
            files.push(f.clone());
        }
        for (level, files) in v.levels.iter_mut().enumerate() {
            if level == 0 {
                files.sort_by(|a, b| {
                    b.largest_seq
                        .cmp(&a.largest_seq)
                        .then(b.number.cmp(&a.number))
                });
            } else {
                files.sort_by(|a, b| key::compare_internal(&a.smallest, &b.smallest));
                for w in files.windows(2) {
                    if largest_user(&w[0]) >= smallest_user(&w[1]) {
                        return Err(Error::corruption(format!(
                            "files {} and {} overlap at level {level}",
                            w[0].number, w[1].number
                        )));
                    }
                }
            }
        }
        v.top = v
            .levels
            .iter()
            .flatten()
            .max_by(|a, b| largest_user(a).cmp(largest_user(b)))
            .cloned();
        Ok(v)
    }

    /// True if `user_key` is above every table's key range.
    fn above_every_file(&self, user_key: &[u8]) -> bool {
        self.top.as_ref().is_none_or(|f| user_key > largest_user(f))
    }

    /// Number of levels.
    pub fn num_levels(&self) -> usize {
        self.levels.len()
    }

    /// Number of live tables.
    pub fn num_files(&self) -> usize {
        self.levels.iter().map(Vec::len).sum()
    }

    /// Every live table with its level, level 0 first.
    pub fn all_files(&self) -> impl Iterator<Item = (usize, &Arc<FileMetaData>)> {
        self.levels
            .iter()
            .enumerate()
            .flat_map(|(l, fs)| fs.iter().map(move |f| (l, f)))
    }

    /// Sum of the file sizes at `level`; panics if `level >= num_levels()`.
    pub fn level_bytes(&self, level: usize) -> u64 {
        self.levels[level].iter().map(|f| f.file_size).sum()
    }

    /// Index of the file at `level` (≥ 1) whose range may hold `user_key`.
    pub fn find_file(&self, level: usize, user_key: &[u8]) -> Option<usize> {
        let files = &self.levels[level];
        let i = files.partition_point(|f| largest_user(f) < user_key);
        (i < files.len() && smallest_user(&files[i]) <= user_key).then_some(i)
    }

    /// Every file whose user-key range may hold `user_key`: the L0 files
    /// covering it, then at most one file per deeper level.
    pub fn files_for_key<'a>(
        &'a self,
        user_key: &'a [u8],
    ) -> impl Iterator<Item = &'a Arc<FileMetaData>> + 'a {
        let (l0, levels): (&[Arc<FileMetaData>], _) = if self.above_every_file(user_key) {
            (&[], 1..1)
        } else {
            (&self.levels[0], 1..self.num_levels())
        };
        let l0 = l0
            .iter()
            .filter(move |f| smallest_user(f) <= user_key && user_key <= largest_user(f));
        let deeper =
            levels.filter_map(move |l| self.find_file(l, user_key).map(|i| &self.levels[l][i]));
        l0.chain(deeper)
    }

    /// Files at `level` whose user-key range intersects `[lo, hi]` (`None`
    /// bounds are open).
    pub fn overlapping(
        &self,
        level: usize,
        lo: Option<&[u8]>,
        hi: Option<&[u8]>,
    ) -> Vec<Arc<FileMetaData>> {
        self.levels[level]
            .iter()
            .filter(|f| {
                lo.is_none_or(|lo| largest_user(f) >= lo)
                    && hi.is_none_or(|hi| smallest_user(f) <= hi)
            })
            .cloned()
            .collect()
    }

    /// Newest entry for `user_key` visible at `snapshot` in the tables of
    /// this version: L0 newest first, then one file per level.
    pub fn get(
        &self,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: SeqNo,
    ) -> Result<Option<Found>> {
        self.get_entry(tables, user_key, snapshot, true)
    }

    /// [`Version::get`], with the value left empty unless `want_value`
    /// (see [`crate::sstable::Table::get_entry`]).
    pub fn get_entry(
        &self,
        tables: &TableCache,
        user_key: &[u8],
        snapshot: SeqNo,
        want_value: bool,
    ) -> Result<Option<Found>> {
        if self.above_every_file(user_key) {
            return Ok(None);
        }
        for f in &self.levels[0] {
            if f.smallest_seq > snapshot
                || user_key < smallest_user(f)
                || user_key > largest_user(f)
            {
                continue;
            }
            let t = tables.get(f.number, f.file_size)?;
            if let Some(found) = t.get_entry(user_key, snapshot, want_value)? {
                return Ok(Some(found));
            }
        }
        for level in 1..self.levels.len() {
            if let Some(i) = self.find_file(level, user_key) {
                let f = &self.levels[level][i];
                let t = tables.get(f.number, f.file_size)?;
                if let Some(found) = t.get_entry(user_key, snapshot, want_value)? {
                    return Ok(Some(found));
                }
            }
        }
        Ok(None)
    }

    /// Batched lookup (Luo & Carey §3.2): `keys` sorted and distinct;
    /// `done[i]` marks keys already resolved by newer components. Visits
    /// components newest to oldest; each table receives all its pending
    /// keys in one `Table::multi_get`, which probes the Bloom filter for each
    /// and reads every needed data block once.
    pub fn multi_get(
        &self,
        tables: &TableCache,
        keys: &[&[u8]],
        snapshot: SeqNo,
        out: &mut [Option<Found>],
        done: &mut [bool],
    ) -> Result<()> {
        let mut pending: Vec<usize> = (0..keys.len()).filter(|&i| !done[i]).collect();
        let mut batch_keys: Vec<&[u8]> = Vec::new();
        let mut batch_out: Vec<Option<Found>> = Vec::new();
        let mut run = |f: &FileMetaData,
                       idx: &[usize],
                       out: &mut [Option<Found>],
                       done: &mut [bool]|
         -> Result<()> {
            if idx.is_empty() {
                return Ok(());
            }
            batch_keys.clear();
            batch_keys.extend(idx.iter().map(|&i| keys[i]));
            batch_out.clear();
            batch_out.resize(idx.len(), None);
            let t = tables.get(f.number, f.file_size)?;
            t.multi_get(&batch_keys, snapshot, &mut batch_out)?;
            for (j, r) in batch_out.drain(..).enumerate() {
                if let Some(found) = r {
                    out[idx[j]] = Some(found);
                    done[idx[j]] = true;
                }
            }
            Ok(())
        };
        for f in &self.levels[0] {
            if pending.is_empty() {
                return Ok(());
            }
            if f.smallest_seq > snapshot {
                continue;
            }
            let idx: Vec<usize> = pending
                .iter()
                .copied()
                .filter(|&i| keys[i] >= smallest_user(f) && keys[i] <= largest_user(f))
                .collect();
            run(f, &idx, out, done)?;
            pending.retain(|&i| !done[i]);
        }
        for level in 1..self.levels.len() {
            if pending.is_empty() {
                return Ok(());
            }
            let files = &self.levels[level];
            let mut p = 0;
            let mut idx = Vec::new();
            for f in files {
                // pending is sorted by key (keys are sorted), so walk both.
                while p < pending.len() && keys[pending[p]] < smallest_user(f) {
                    p += 1;
                }
                idx.clear();
                while p < pending.len() && keys[pending[p]] <= largest_user(f) {
                    idx.push(pending[p]);
                    p += 1;
                }
                run(f, &idx, out, done)?;
                if p >= pending.len() {
                    break;
                }
            }
            pending.retain(|&i| !done[i]);
        }
        Ok(())
    }

    /// Iterators over every table, for a full merge: one per L0 file and one
    /// concatenating iterator per non-empty level.
    pub fn iterators(
        &self,
        tables: &Arc<TableCache>,
        purpose: ReadPurpose,
    ) -> Result<Vec<Box<dyn InternalIterator>>> {
        let mut out: Vec<Box<dyn InternalIterator>> = Vec::new();
        for f in &self.levels[0] {
            let t = tables.get(f.number, f.file_size)?;
            out.push(Box::new(t.iter(purpose)));
        }
        for level in 1..self.levels.len() {
            if !self.levels[level].is_empty() {
                out.push(Box::new(LevelIter::new(
                    tables.clone(),
                    self.levels[level].clone(),
                    purpose,
                )));
            }
        }
        Ok(out)
    }
}

/// Concatenates the tables of one sorted level, opening each lazily.
pub struct LevelIter {
    tables: Arc<TableCache>,
    files: Vec<Arc<FileMetaData>>,
    purpose: ReadPurpose,
    index: usize,
    current: Option<TableIter>,
}

impl LevelIter {
    /// `files` must be sorted and disjoint (a level ≥ 1, or a compaction's
    /// inputs from one such level).
    pub fn new(
        tables: Arc<TableCache>,
        files: Vec<Arc<FileMetaData>>,
        purpose: ReadPurpose,
    ) -> Self {
        LevelIter {
            tables,
            files,
            purpose,
            index: 0,
            current: None,
        }
    }

    fn open(&mut self, index: usize) -> Result<()> {
        self.index = index;
        self.current = None;
        if let Some(f) = self.files.get(index) {
            let t = self.tables.get(f.number, f.file_size)?;
            self.current = Some(t.iter(self.purpose));
        }
        Ok(())
    }

    fn skip_empty(&mut self) -> Result<()> {
        while let Some(it) = &self.current {
            if it.valid() {
                return Ok(());
            }
            let next = self.index + 1;
            self.open(next)?;
            if let Some(it) = &mut self.current {
                it.seek_to_first()?;
            }
        }
        Ok(())
    }
}

impl InternalIterator for LevelIter {
    fn valid(&self) -> bool {
        self.current.as_ref().is_some_and(|c| c.valid())
    }
    fn seek_to_first(&mut self) -> Result<()> {
        self.open(0)?;
        if let Some(it) = &mut self.current {
            it.seek_to_first()?;
        }
        self.skip_empty()
    }
    fn seek(&mut self, target: &[u8]) -> Result<()> {
        let i = self
            .files
            .partition_point(|f| key::compare_internal(&f.largest, target).is_lt());
        self.open(i)?;
        if let Some(it) = &mut self.current {
            it.seek(target)?;
        }
        self.skip_empty()
    }
    fn next(&mut self) -> Result<()> {
        if let Some(it) = &mut self.current {
            it.next()?;
        }
        self.skip_empty()
    }
    fn key(&self) -> &[u8] {
        self.current.as_ref().map(|c| c.key()).unwrap_or(&[])
    }
    fn value(&self) -> &[u8] {
        self.current.as_ref().map(|c| c.value()).unwrap_or(&[])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ikey(user: &[u8]) -> Vec<u8> {
        key::make_internal_key(user, 1, key::ValueKind::Value)
    }

    fn file(number: u64, lo: &[u8], hi: &[u8]) -> Arc<FileMetaData> {
        Arc::new(FileMetaData {
            number,
            file_size: 100,
            smallest: ikey(lo),
            largest: ikey(hi),
            smallest_seq: number,
            largest_seq: number,
            num_entries: 1,
            num_deletions: 0,
        })
    }

    /// The files a walk of every level finds for `k` (the definition
    /// `files_for_key` must agree with, its fast path included).
    fn walk(v: &Version, k: &[u8]) -> Vec<u64> {
        let l0 = v.levels[0]
            .iter()
            .filter(|f| smallest_user(f) <= k && k <= largest_user(f));
        let deeper = (1..v.num_levels()).filter_map(|l| v.find_file(l, k).map(|i| &v.levels[l][i]));
        l0.chain(deeper).map(|f| f.number).collect()
    }

    #[test]
    fn files_for_key_agrees_with_a_walk_of_every_level_above_and_below_the_top() {
        let edit = VersionEdit {
            new_files: vec![
                (0, file(9, b"c", b"k")),
                (0, file(8, b"a", b"d")),
                (1, file(5, b"b", b"f")),
                (1, file(6, b"h", b"m")),
                (2, file(3, b"a", b"z")),
            ],
            ..VersionEdit::default()
        };
        let v = Version::new(3).apply(&edit).unwrap();
        for k in [
            &b"a"[..],
            b"c",
            b"g",
            b"m",
            b"y",
            b"z",
            b"z\0",
            b"zz",
            b"\xff",
        ] {
            let got: Vec<u64> = v.files_for_key(k).map(|f| f.number).collect();
            assert_eq!(got, walk(&v, k), "key {k:?}");
        }
        // Above every table: no file.
        assert_eq!(v.files_for_key(b"zz").count(), 0);
        assert_eq!(v.files_for_key(b"z").count(), 1);
        // The top moves down when its file leaves.
        let v = v
            .apply(&VersionEdit {
                deleted_files: vec![(2, 3)],
                ..VersionEdit::default()
            })
            .unwrap();
        assert_eq!(v.files_for_key(b"y").count(), 0);
        assert_eq!(
            v.files_for_key(b"m").map(|f| f.number).collect::<Vec<_>>(),
            [6]
        );
        assert_eq!(Version::new(3).files_for_key(b"a").count(), 0);
    }
}
