//! Compaction: choosing which tables to merge ([`CompactionPicker`],
//! leveled by default) and merging them ([`run`]).
//!
//! Leveled policy (LevelDB/RocksDB): L0 is tiered (its files overlap) and is
//! compacted into L1 when it holds `l0_compaction_trigger` files; level
//! `n ≥ 1` is compacted into `n+1` when its size exceeds
//! `max_bytes_for_level_base × ratio^(n-1)`, one file at a time, rotating
//! through the key space. Inputs with nothing to merge move down without a
//! rewrite ([`Compaction::is_trivial_move`]): one file of a level ≥ 1, or
//! all of level 0 when its files' key ranges are disjoint (keys written in
//! order, such as time-ordered ids), unless the moved range overlaps more
//! than ten target-sized files two levels down (LevelDB's grandparent
//! rule; RocksDB moves disjoint level-0 files likewise).
//!
//! Tiered policy ([`TieredPicker`], `Options::compaction_style`; the
//! primary of PERSEID §4.4 is tiered, where sequence-number zone maps
//! separate components best): every sorted run is one table of level 0,
//! which already allows overlapping tables read newest first, so the read
//! path, the MANIFEST and recovery are unchanged. Runs are classed by size
//! (class `c` holds runs of `memtable_size × T^c` to `× T^(c+1)` bytes);
//! when `T` (`Options::tiered_runs`) consecutive runs share a class they are
//! merged into one table of level 0 (never cut at `target_file_size`).
//! Only runs adjacent in time are merged, so the runs' sequence ranges stay
//! disjoint and ordering level 0 by largest sequence number orders every
//! key's versions. Levels ≥ 1 are written only by manual compactions
//! (`compact_range`), which stay leveled; level 0 stays newer than them.
//! This is tiering within an L0-like level, not a tiered run per level:
//! levels ≥ 1 keep their disjoint-table invariant, which the read path
//! and every index strategy rely on.
//!
//! Merge rules: for each user key, entries are seen newest first. An entry is
//! dropped if a newer entry of the same key is visible to every live
//! snapshot (`Shadowed`), or if it is a tombstone visible to every snapshot
//! and no deeper level can hold the key (`ObsoleteTombstone`). Every dropped
//! entry is reported to the extensions' compaction observers (DELI's repair
//! stream). Outputs are cut at user-key boundaries so a user key never spans
//! two files of one level.
//!
//! Merge operands (see [`crate::merge`]): the newest operand of a key that
//! every live snapshot sees is combined with the key's older entries —
//! fully with the value or tombstone beneath it, or with nothing when no
//! deeper level can hold the key, and otherwise partially among the
//! operands — and the combined entries are dropped (`Merged`).

use std::path::Path;
use std::sync::Arc;

use crate::cache::TableCache;
use crate::error::Result;
use crate::filename;
use crate::hooks::{
    CompactionContext, CompactionObserver, CompactionScratch, DropReason, EngineHooks, EntryRef,
    TableContext, TableReason,
};
use crate::iter::merging::MergingIterator;
use crate::iter::InternalIterator;
use crate::key::{self, SeqNo, ValueKind};
use crate::memtable::MemSide;
use crate::merge;
use crate::options::Options;
use crate::sstable::{TableBuildOptions, TableBuilder};
use crate::stats::ReadPurpose;
use crate::version::{FileMetaData, LevelIter, Version, VersionEdit};

/// A chosen compaction: `inputs[0]` from `level`, `inputs[1]` from
/// `output_level`, which is `level + 1` except for a manual rewrite of the
/// last level in place (`output_level == level`, `inputs[1]` empty).
#[derive(Debug, Clone)]
pub struct Compaction {
    /// Level of the first input set.
    pub level: usize,
    /// Level the outputs are written to.
    pub output_level: usize,
    /// Input tables at `level` and at `output_level`.
    pub inputs: [Vec<Arc<FileMetaData>>; 2],
    /// Whether a lone input with nothing to merge may be moved instead of
    /// rewritten (manual compactions rewrite, to drop obsolete versions).
    pub allow_trivial_move: bool,
    /// Write the whole output as one table (a tiered run), never cut at
    /// `target_file_size`.
    pub single_output: bool,
}

impl Compaction {
    /// `inputs[0]` at `level` merged with the overlapping files of `level + 1`.
    pub fn new(
        level: usize,
        inputs0: Vec<Arc<FileMetaData>>,
        inputs1: Vec<Arc<FileMetaData>>,
    ) -> Self {
        Compaction {
            level,
            output_level: level + 1,
            inputs: [inputs0, inputs1],
            allow_trivial_move: true,
            single_output: false,
        }
    }

    /// A tiered merge of level-0 runs into one level-0 run.
    pub fn tiered(runs: Vec<Arc<FileMetaData>>) -> Self {
        Compaction {
            level: 0,
            output_level: 0,
            inputs: [runs, Vec::new()],
            allow_trivial_move: false,
            single_output: true,
        }
    }

    /// Level the outputs are written to.
    pub fn output_level(&self) -> usize {
        self.output_level
    }

    /// Every input table, those at `level` first.
    pub fn input_files(&self) -> impl Iterator<Item = &Arc<FileMetaData>> {
        self.inputs[0].iter().chain(self.inputs[1].iter())
    }

    /// Files moving down with nothing to merge: no rewrite needed. One
    /// file of a level ≥ 1, or every file of level 0 when their user-key
    /// ranges are pairwise disjoint (keys written in order, as time-ordered
    /// ids are: each flush lies beside the last). A level-0 set is moved
    /// whole: the picker takes every level-0 file, so no older level-0
    /// file that could shadow a moved one is left above it.
    pub fn is_trivial_move(&self) -> bool {
        self.allow_trivial_move
            && self.output_level == self.level + 1
            && self.inputs[1].is_empty()
            && match self.level {
                0 => !self.inputs[0].is_empty() && disjoint(&self.inputs[0]),
                _ => self.inputs[0].len() == 1,
            }
    }
}

/// Whether the user-key ranges of `files` are pairwise disjoint.
fn disjoint(files: &[Arc<FileMetaData>]) -> bool {
    let mut ranges: Vec<(&[u8], &[u8])> = files
        .iter()
        .map(|f| (key::user_key(&f.smallest), key::user_key(&f.largest)))
        .collect();
    ranges.sort_unstable();
    ranges.windows(2).all(|w| match w {
        [a, b] => a.1 < b.0,
        _ => true,
    })
}

/// Chooses compactions. Implementations must only return inputs that are
/// present in `version` and must include, at the output level, every file
/// overlapping the inputs' key range.
pub trait CompactionPicker: Send + Sync {
    /// The most urgent compaction, or `None` if the tree is in shape.
    fn pick(&self, version: &Version) -> Option<Compaction>;
    /// Compaction score of each level (≥ 1 means it needs compaction).
    fn scores(&self, version: &Version) -> Vec<f64>;
    /// The count the write path compares with `l0_slowdown_trigger` and
    /// `l0_stop_trigger`: level 0's tables by default.
    fn l0_pressure(&self, version: &Version) -> usize {
        version.levels.first().map_or(0, |l| l.len())
    }
}

/// A picker for `opts.compaction_style`.
pub fn picker_for(opts: &Options) -> Box<dyn CompactionPicker> {
    match opts.compaction_style {
        crate::options::CompactionStyle::Leveled => Box::new(LeveledPicker::new(opts)),
        crate::options::CompactionStyle::Tiered => Box::new(TieredPicker::new(opts)),
    }
}

/// The size-tiered policy described in the module documentation.
pub struct TieredPicker {
    runs: usize,
    base: u64,
}

impl TieredPicker {
    /// A picker with `opts.tiered_runs` runs per tier, the smallest tier
    /// holding runs up to `T × memtable_size` bytes.
    pub fn new(opts: &Options) -> Self {
        TieredPicker {
            runs: opts.tiered_runs.max(2),
            base: (opts.memtable_size as u64).max(1),
        }
    }

    /// Size class of a run: `floor(log_T(size / base))`, 0 below `base`.
    fn class(&self, size: u64) -> u32 {
        let mut c = 0;
        let mut bound = self.base.saturating_mul(self.runs as u64);
        while size >= bound && bound < u64::MAX {
            c += 1;
            bound = bound.saturating_mul(self.runs as u64);
        }
        c
    }

    /// The first window (newest first) of consecutive level-0 runs of one
    /// class, and its length.
    fn longest_windows(&self, v: &Version) -> Vec<(usize, usize)> {
        let runs = v.levels.first().map(Vec::as_slice).unwrap_or(&[]);
        let mut out = Vec::new();
        let mut i = 0;
        while i < runs.len() {
            let c = self.class(runs[i].file_size);
            let mut j = i + 1;
            while j < runs.len() && self.class(runs[j].file_size) == c {
                j += 1;
            }
            out.push((i, j - i));
            i = j;
        }
        out
    }
}

impl CompactionPicker for TieredPicker {
    fn scores(&self, v: &Version) -> Vec<f64> {
        let mut scores = vec![0.0; v.num_levels()];
        let longest = self
            .longest_windows(v)
            .iter()
            .map(|w| w.1)
            .max()
            .unwrap_or(0);
        if let Some(s) = scores.first_mut() {
            *s = longest as f64 / self.runs as f64;
        }
        scores
    }

    fn pick(&self, v: &Version) -> Option<Compaction> {
        let runs = v.levels.first()?;
        let (start, len) = self
            .longest_windows(v)
            .into_iter()
            .find(|w| w.1 >= self.runs)?;
        Some(Compaction::tiered(runs.get(start..start + len)?.to_vec()))
    }

    /// The runs of the fullest tier: writes slow down and stop when merges
    /// fall behind, not when the tree simply holds many tiers.
    fn l0_pressure(&self, v: &Version) -> usize {
        self.longest_windows(v)
            .iter()
            .map(|w| w.1)
            .max()
            .unwrap_or(0)
    }
}

/// The leveled policy described in the module documentation.
pub struct LeveledPicker {
    l0_trigger: usize,
    /// A move is refused if the moved files overlap more than this many
    /// bytes two levels down (LevelDB's grandparent rule: a later merge of
    /// the moved files would be that large).
    max_grandparent_overlap: u64,
    level_base: u64,
    ratio: u64,
    /// Per level, the largest user key of the last file compacted (rotation).
    pointers: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl LeveledPicker {
    /// A picker with the triggers and level sizes of `opts`.
    pub fn new(opts: &Options) -> Self {
        LeveledPicker {
            l0_trigger: opts.l0_compaction_trigger,
            max_grandparent_overlap: opts.target_file_size.saturating_mul(10),
            level_base: opts.max_bytes_for_level_base,
            ratio: opts.level_size_ratio,
            pointers: std::sync::Mutex::new(vec![Vec::new(); opts.num_levels]),
        }
    }

    fn max_bytes(&self, level: usize) -> u64 {
        let mut b = self.level_base;
        for _ in 1..level {
            b = b.saturating_mul(self.ratio);
        }
        b
    }
}

/// User-key range covered by `files`.
pub fn key_range(files: &[Arc<FileMetaData>]) -> (Vec<u8>, Vec<u8>) {
    let mut lo: Option<&[u8]> = None;
    let mut hi: Option<&[u8]> = None;
    for f in files {
        let s = key::user_key(&f.smallest);
        let l = key::user_key(&f.largest);
        if lo.is_none_or(|x| s < x) {
            lo = Some(s);
        }
        if hi.is_none_or(|x| l > x) {
            hi = Some(l);
        }
    }
    (lo.unwrap_or(&[]).to_vec(), hi.unwrap_or(&[]).to_vec())
}

impl CompactionPicker for LeveledPicker {
    fn scores(&self, v: &Version) -> Vec<f64> {
        let n = v.num_levels();
        let mut scores = vec![0.0; n];
        scores[0] = v.levels[0].len() as f64 / self.l0_trigger as f64;
        // The last level never compacts further.
        for (level, score) in scores.iter_mut().enumerate().take(n - 1).skip(1) {
            *score = v.level_bytes(level) as f64 / self.max_bytes(level) as f64;
        }
        scores
    }

    fn pick(&self, v: &Version) -> Option<Compaction> {
        let scores = self.scores(v);
        let (level, &score) = scores
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))?;
        if score < 1.0 {
            return None;
        }
        let inputs0 = if level == 0 {
            v.levels[0].clone()
        } else {
            let mut ptrs = crate::sync::lock(&self.pointers);
            let files = &v.levels[level];
            let after = &ptrs[level];
            let f = files
                .iter()
                .find(|f| after.is_empty() || key::user_key(&f.largest) > after.as_slice())
                .or_else(|| files.first())?
                .clone();
            ptrs[level] = key::user_key(&f.largest).to_vec();
            vec![f]
        };
        let (lo, hi) = key_range(&inputs0);
        let inputs1 = v.overlapping(level + 1, Some(&lo), Some(&hi));
        let mut c = Compaction::new(level, inputs0, inputs1);
        if c.is_trivial_move() && level + 2 < v.num_levels() {
            let below: u64 = v
                .overlapping(level + 2, Some(&lo), Some(&hi))
                .iter()
                .map(|f| f.file_size)
                .sum();
            c.allow_trivial_move = below <= self.max_grandparent_overlap;
        }
        Some(c)
    }
}

/// Everything a compaction or flush needs to write tables.
pub struct BuildEnv<'a> {
    /// The database directory.
    pub dir: &'a Path,
    /// The database's options.
    pub opts: &'a Options,
    /// Extensions whose table and compaction observers see the outputs.
    pub hooks: &'a [Arc<dyn EngineHooks>],
    /// Allocates a file number for a new table and registers it as an
    /// in-progress output, atomically, so that obsolete-file deletion never
    /// removes a table that is being written.
    pub allocate_output: &'a dyn Fn() -> u64,
}

impl BuildEnv<'_> {
    /// Table builder options from the database's options.
    pub fn table_options(&self) -> TableBuildOptions {
        TableBuildOptions {
            block_size: self.opts.block_size,
            restart_interval: self.opts.block_restart_interval,
            compression: self.opts.compression,
            bloom_bits_per_key: self.opts.bloom_bits_per_key,
            fs: self.opts.fs.clone(),
        }
    }

    /// Starts a table at `level`, with one observer per extension that
    /// asks; `source` is what the table is written from: a compaction's
    /// inputs and scratch, or a flushed memtable's side structure.
    pub fn start_table(
        &self,
        level: usize,
        reason: TableReason,
        source: &TableSource<'_>,
    ) -> Result<(u64, TableBuilder)> {
        let number = (self.allocate_output)();
        let (inputs, scratch, tables, side) = match source {
            TableSource::Compaction {
                inputs,
                scratch,
                tables,
            } => (
                inputs.to_vec(),
                Some(Arc::clone(scratch)),
                Some(Arc::clone(tables)),
                None,
            ),
            TableSource::Flush { side } => (Vec::new(), None, None, side.clone()),
        };
        let ctx = TableContext {
            file_number: number,
            level,
            reason,
            input_files: inputs.iter().map(|f| f.number).collect(),
            inputs,
            scratch,
            tables,
            side,
        };
        let observers = self
            .hooks
            .iter()
            .filter_map(|h| h.table_observer(&ctx))
            .collect();
        let path = filename::table_file(self.dir, number);
        let builder = TableBuilder::new(&path, self.table_options(), observers)?;
        Ok((number, builder))
    }
}

/// What a table is written from (see [`BuildEnv::start_table`]).
pub enum TableSource<'a> {
    /// A compaction's input tables and its per-compaction scratch.
    Compaction {
        /// The input tables, at both levels.
        inputs: &'a [Arc<FileMetaData>],
        /// Shared by every output of the compaction.
        scratch: &'a Arc<CompactionScratch>,
        /// The cache the inputs are read through.
        tables: &'a Arc<TableCache>,
    },
    /// A memtable.
    Flush {
        /// The memtable's side structure, if it has one.
        side: Option<Arc<dyn MemSide>>,
    },
}

/// Finishes a table and describes it for the manifest.
pub fn finish_table(number: u64, builder: TableBuilder) -> Result<Arc<FileMetaData>> {
    let built = builder.finish()?;
    let p = built.properties;
    Ok(Arc::new(FileMetaData {
        number,
        file_size: built.file_size,
        smallest: p.smallest_key,
        largest: p.largest_key,
        smallest_seq: p.smallest_seq,
        largest_seq: p.largest_seq,
        num_entries: p.num_entries,
        num_deletions: p.num_deletions,
    }))
}

/// Result of running a compaction.
pub struct CompactionOutput {
    /// Removes the inputs and adds the outputs.
    pub edit: VersionEdit,
    /// Bytes of output tables written.
    pub bytes_written: u64,
    /// Input entries not written (obsolete versions and tombstones).
    pub entries_dropped: u64,
}

/// Reports a dropped entry to every compaction observer.
fn report_dropped(
    observers: &mut [Box<dyn CompactionObserver>],
    p: &key::ParsedKey<'_>,
    value: &[u8],
    reason: DropReason,
) {
    let entry = EntryRef {
        user_key: p.user_key,
        seq: p.seq,
        kind: p.kind,
        value,
    };
    for o in observers {
        o.on_dropped(&entry, reason);
    }
}

/// Appends one entry to the compaction's current output, first finishing
/// the output at a user-key boundary once it reached the target size.
#[allow(clippy::too_many_arguments)]
fn add_output(
    env: &BuildEnv<'_>,
    current: &mut Option<(u64, TableBuilder)>,
    edit: &mut VersionEdit,
    bytes_written: &mut u64,
    (out_level, source, single_output): (usize, &TableSource<'_>, bool),
    first_of_key: bool,
    ikey: &[u8],
    value: &[u8],
) -> Result<()> {
    // Cut outputs only between user keys.
    if first_of_key {
        let target = if single_output {
            u64::MAX
        } else {
            env.opts.target_file_size
        };
        if let Some((n, b)) = current.take_if(|(_, b)| b.file_size() >= target) {
            let meta = finish_table(n, b)?;
            *bytes_written += meta.file_size;
            edit.new_files.push((out_level, meta));
        }
    }
    if current.is_none() {
        *current = Some(env.start_table(out_level, TableReason::Compaction, source)?);
    }
    if let Some((_, b)) = current {
        b.add(ikey, value)?;
    }
    Ok(())
}

/// Merges the inputs of `c` into new tables at `c.output_level()`.
///
/// `smallest_snapshot` is the oldest sequence number any reader may still
/// read at. Reads bypass the block cache. Returns the edit to install; on
/// error, partially written outputs are left for obsolete-file deletion.
pub fn run(
    c: &Compaction,
    version: &Version,
    tables: &Arc<TableCache>,
    env: &BuildEnv<'_>,
    smallest_snapshot: SeqNo,
) -> Result<CompactionOutput> {
    let out_level = c.output_level();
    let mut edit = VersionEdit::default();
    for f in &c.inputs[0] {
        edit.deleted_files.push((c.level, f.number));
    }
    for f in &c.inputs[1] {
        edit.deleted_files.push((c.output_level, f.number));
    }
    if c.is_trivial_move() {
        for f in &c.inputs[0] {
            edit.new_files.push((out_level, f.clone()));
        }
        return Ok(CompactionOutput {
            edit,
            bytes_written: 0,
            entries_dropped: 0,
        });
    }

    let mut children: Vec<Box<dyn InternalIterator>> = Vec::new();
    if c.level == 0 {
        for f in &c.inputs[0] {
            children.push(Box::new(
                tables
                    .get(f.number, f.file_size)?
                    .iter(ReadPurpose::Compaction),
            ));
        }
    } else {
        children.push(Box::new(LevelIter::new(
            tables.clone(),
            c.inputs[0].clone(),
            ReadPurpose::Compaction,
        )));
    }
    if !c.inputs[1].is_empty() {
        children.push(Box::new(LevelIter::new(
            tables.clone(),
            c.inputs[1].clone(),
            ReadPurpose::Compaction,
        )));
    }
    let mut input = MergingIterator::new(children);

    let all: Vec<Arc<FileMetaData>> = c.input_files().cloned().collect();
    let (lo, hi) = key_range(&all);
    let scratch = Arc::new(CompactionScratch::default());
    let source = TableSource::Compaction {
        inputs: &all,
        scratch: &scratch,
        tables,
    };
    // A merge into level 0 (tiered) has level-0 runs outside its inputs
    // that may hold older versions: they count as deeper.
    let inputs: std::collections::HashSet<u64> = c.input_files().map(|f| f.number).collect();
    let other_l0: Vec<Arc<FileMetaData>> = if out_level == 0 {
        version
            .overlapping(0, Some(&lo), Some(&hi))
            .into_iter()
            .filter(|f| !inputs.contains(&f.number))
            .collect()
    } else {
        Vec::new()
    };
    let deeper_overlap = !other_l0.is_empty()
        || (out_level + 1..version.num_levels())
            .any(|l| !version.overlapping(l, Some(&lo), Some(&hi)).is_empty());
    let ctx = CompactionContext {
        level: c.level,
        input_files: c.input_files().map(|f| f.number).collect(),
        bottommost: !deeper_overlap,
    };
    let mut observers: Vec<Box<dyn CompactionObserver>> = env
        .hooks
        .iter()
        .filter_map(|h| h.compaction_observer(&ctx))
        .collect();
    // True if no level below the output can hold `user_key`.
    let is_base_level_for = |user_key: &[u8]| -> bool {
        !deeper_overlap
            || (other_l0.iter().all(|f| {
                user_key < key::user_key(&f.smallest) || user_key > key::user_key(&f.largest)
            }) && (out_level + 1..version.num_levels())
                .all(|l| version.find_file(l, user_key).is_none()))
    };

    let mut current: Option<(u64, TableBuilder)> = None;
    let mut bytes_written = 0u64;
    let mut dropped = 0u64;
    let mut current_user_key: Option<Vec<u8>> = None;
    let mut last_seq_for_key = SeqNo::MAX;
    input.seek_to_first()?;
    while input.valid() {
        let ikey = input.key();
        let parsed = key::parse_internal_key(ikey)?;
        let first_of_key = current_user_key.as_deref() != Some(parsed.user_key);
        if first_of_key {
            current_user_key = Some(parsed.user_key.to_vec());
            last_seq_for_key = SeqNo::MAX;
        }
        let reason = if last_seq_for_key <= smallest_snapshot {
            Some(DropReason::Shadowed)
        } else if parsed.kind == ValueKind::Deletion
            && parsed.seq <= smallest_snapshot
            && is_base_level_for(parsed.user_key)
        {
            Some(DropReason::ObsoleteTombstone)
        } else {
            None
        };
        last_seq_for_key = parsed.seq;
        if let Some(reason) = reason {
            dropped += 1;
            report_dropped(&mut observers, &parsed, input.value(), reason);
        } else if parsed.kind == ValueKind::Merge && parsed.seq <= smallest_snapshot {
            // Every snapshot sees this operand: combine the key's older
            // entries into it. Leaves `input` past the combined entries.
            let op = merge::require(env.opts.merge_operator.as_ref())?;
            let user_key = parsed.user_key.to_vec();
            let seq = parsed.seq;
            let mut history = merge::History::default();
            history.push(ValueKind::Merge, input.value());
            input.next()?;
            while history.base.is_none() && input.valid() {
                let p = key::parse_internal_key(input.key())?;
                if p.user_key != user_key.as_slice() {
                    break;
                }
                history.push(p.kind, input.value());
                dropped += 1;
                report_dropped(&mut observers, &p, input.value(), DropReason::Merged);
                input.next()?;
            }
            // Entries below a base are shadowed by it (`last_seq_for_key`).
            // Without one, a full merge needs the key absent deeper down.
            let operands = &history.operands;
            let (kind, value) = if history.base.is_some() || is_base_level_for(&user_key) {
                match history.full_merge(op, &user_key)? {
                    Some(v) => (ValueKind::Value, v),
                    None => (ValueKind::Deletion, Vec::new()),
                }
            } else if operands.len() == 1 {
                (ValueKind::Merge, operands[0].clone())
            } else {
                let refs: Vec<&[u8]> = operands.iter().map(Vec::as_slice).collect();
                (ValueKind::Merge, op.partial_merge(&user_key, &refs)?)
            };
            if kind == ValueKind::Deletion && is_base_level_for(&user_key) {
                // Nothing older to hide.
                dropped += 1;
                continue;
            }
            let ikey = key::make_internal_key(&user_key, seq, kind);
            add_output(
                env,
                &mut current,
                &mut edit,
                &mut bytes_written,
                (out_level, &source, c.single_output),
                first_of_key,
                &ikey,
                &value,
            )?;
            continue;
        } else {
            add_output(
                env,
                &mut current,
                &mut edit,
                &mut bytes_written,
                (out_level, &source, c.single_output),
                first_of_key,
                ikey,
                input.value(),
            )?;
        }
        input.next()?;
    }
    if let Some((n, b)) = current.take() {
        let meta = finish_table(n, b)?;
        bytes_written += meta.file_size;
        edit.new_files.push((out_level, meta));
    }
    for o in &mut observers {
        o.finish()?;
    }
    Ok(CompactionOutput {
        edit,
        bytes_written,
        entries_dropped: dropped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::{Version, VersionEdit};

    fn file(number: u64, lo: &[u8], hi: &[u8], size: u64) -> Arc<FileMetaData> {
        Arc::new(FileMetaData {
            number,
            file_size: size,
            smallest: key::make_internal_key(lo, number, ValueKind::Value),
            largest: key::make_internal_key(hi, number, ValueKind::Value),
            smallest_seq: number,
            largest_seq: number,
            num_entries: 1,
            num_deletions: 0,
        })
    }

    fn version(files: Vec<(usize, Arc<FileMetaData>)>) -> Version {
        let edit = VersionEdit {
            new_files: files,
            ..VersionEdit::default()
        };
        Version::new(4).apply(&edit).unwrap()
    }

    fn picker() -> LeveledPicker {
        let mut opts = Options::small_for_tests();
        opts.l0_compaction_trigger = 2;
        opts.target_file_size = 100;
        LeveledPicker::new(&opts)
    }

    #[test]
    fn disjoint_level0_files_move_down_whole() {
        let v = version(vec![
            (0, file(3, b"e", b"f", 10)),
            (0, file(2, b"a", b"b", 10)),
            (0, file(4, b"c", b"d", 10)),
        ]);
        let c = picker().pick(&v).unwrap();
        assert_eq!((c.level, c.output_level), (0, 1));
        assert!(c.is_trivial_move());
        assert_eq!(c.inputs[0].len(), 3);
    }

    #[test]
    fn level0_files_that_overlap_or_share_a_key_are_merged() {
        // Overlapping ranges.
        let v = version(vec![
            (0, file(2, b"a", b"c", 10)),
            (0, file(3, b"b", b"d", 10)),
        ]);
        assert!(!picker().pick(&v).unwrap().is_trivial_move());
        // One user key at the edge of both (two versions of "c").
        let v = version(vec![
            (0, file(2, b"a", b"c", 10)),
            (0, file(3, b"c", b"d", 10)),
        ]);
        assert!(!picker().pick(&v).unwrap().is_trivial_move());
        // Disjoint among themselves, but a file of level 1 lies between.
        let v = version(vec![
            (0, file(2, b"a", b"b", 10)),
            (0, file(3, b"e", b"f", 10)),
            (1, file(1, b"c", b"d", 10)),
        ]);
        let c = picker().pick(&v).unwrap();
        assert_eq!(c.inputs[1].len(), 1);
        assert!(!c.is_trivial_move());
    }

    #[test]
    fn a_move_over_too_many_grandparent_bytes_is_a_merge() {
        // Level 2 under the moved range: 10 × target_file_size is the most
        // a move may leave for a later merge.
        let small = version(vec![
            (0, file(5, b"a", b"b", 10)),
            (0, file(6, b"c", b"d", 10)),
            (2, file(1, b"a", b"d", 1_000)),
        ]);
        assert!(picker().pick(&small).unwrap().is_trivial_move());
        let large = version(vec![
            (0, file(5, b"a", b"b", 10)),
            (0, file(6, b"c", b"d", 10)),
            (2, file(1, b"a", b"d", 1_001)),
        ]);
        assert!(!picker().pick(&large).unwrap().is_trivial_move());
    }

    #[test]
    fn a_manual_compaction_never_moves() {
        let v = version(vec![
            (0, file(2, b"a", b"b", 10)),
            (0, file(3, b"c", b"d", 10)),
        ]);
        let mut c = picker().pick(&v).unwrap();
        c.allow_trivial_move = false;
        assert!(!c.is_trivial_move());
    }
}
