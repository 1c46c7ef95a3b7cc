//! The write path: group commit, memtable switching and L0 back-pressure.
//!
//! Writers queue up; the writer at the front (the leader) takes the batches
//! of the writers behind it (up to a size limit), assigns consecutive
//! sequence numbers, appends them to the WAL as one record, fsyncs if any of
//! them asked for `sync`, inserts them into the memtable, publishes the new
//! last sequence and wakes the group. WAL and memtable work happen outside
//! the state lock; only the leader does them, so they are serialized.
//!
//! Extensions that maintain structures synchronously (secondary indexes)
//! see every batch on the leader after the WAL append and before the batch
//! enters the memtable ([`crate::hooks::EngineHooks::before_batch`]), with
//! the components the batch shadows; a guard they return is held until the
//! batch's last sequence number is published, so a reader that pins its
//! snapshot under the same lock sees their structures exactly at the
//! published sequence. [`DbInner::pause_writes`] lets an extension scan the
//! data while no write is in flight.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::batch::WriteBatch;
use crate::error::{Error, IoContext, Result};
use crate::filename;
use crate::hooks::{BatchContext, BatchGuard, EngineHooks};
use crate::key::{self, SeqNo};
use crate::memtable::{MemTable, Shadowed};
use crate::merge;
use crate::options::{WriteOptions, MAX_KEY_SIZE, MAX_VALUE_SIZE};
use crate::stats::Counters;
use crate::wal::LogWriter;

use super::{DbInner, State};

/// A queued write.
///
/// A queued writer waits on its own `cv` (with the state lock) and is
/// woken only when its result is set or when it reaches the front of the
/// queue: a write wakes no thread that it cannot unblock.
pub(crate) struct Writer {
    batch: Mutex<Option<WriteBatch>>,
    sync: bool,
    /// The writer's `WriteOptions::min_sequence`.
    min_seq: SeqNo,
    result: Mutex<Option<Result<()>>>,
    cv: Condvar,
}

impl Writer {
    fn new(batch: Option<WriteBatch>, sync: bool, min_seq: SeqNo) -> Arc<Writer> {
        Arc::new(Writer {
            batch: Mutex::new(batch),
            sync,
            min_seq,
            result: Mutex::new(None),
            cv: Condvar::new(),
        })
    }

    /// A queue entry for `batch`: `spare` refilled when no one else holds
    /// it (a leader's entry, kept in `State::spare_writer` after its write
    /// was published), else a new one.
    fn reuse(
        spare: Option<Arc<Writer>>,
        batch: WriteBatch,
        sync: bool,
        min_seq: SeqNo,
    ) -> Arc<Writer> {
        if let Some(mut w) = spare {
            if let Some(m) = Arc::get_mut(&mut w) {
                *m.batch.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(batch);
                *m.result.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
                m.sync = sync;
                m.min_seq = min_seq;
                return w;
            }
        }
        Writer::new(Some(batch), sync, min_seq)
    }
}

/// Wakes the writer now at the front of the queue (it leads the next
/// group). Caller holds the state lock and has just popped the front.
pub(crate) fn wake_front(st: &State) {
    if let Some(f) = st.writers.front() {
        f.cv.notify_one();
    }
}

/// Largest group a leader assembles.
const MAX_GROUP_BYTES: usize = 1 << 20;

/// Keys of a write group whose memtable inserts the leader prepares
/// ([`MemTable::prepare_insert`]) before its WAL record.
const PREPARED_INSERTS: usize = 8;

use crate::sync::lock;

/// Rejects batches with oversized keys or values (nothing is written);
/// returns whether the batch holds merge operands. From the batch's
/// summary, without decoding it (a batch is well formed by construction,
/// or checked whole by `WriteBatch::from_data`).
pub(crate) fn validate_batch(batch: &WriteBatch) -> Result<bool> {
    let (key, value) = batch.longest();
    if key > MAX_KEY_SIZE {
        return Err(Error::invalid(format!(
            "key of {key} bytes exceeds the limit of {MAX_KEY_SIZE}"
        )));
    }
    if value > MAX_VALUE_SIZE {
        return Err(Error::invalid(format!(
            "value of {value} bytes exceeds the limit of {MAX_VALUE_SIZE}"
        )));
    }
    Ok(batch.has_merge())
}

/// Inserts every operation of `batch` (sequence numbers from
/// `batch.sequence()`) into `mem`; returns user bytes. With `shadowed`
/// (one slot per operation), sets each operation's slot to the entry of
/// its key that it shadows in `mem` (see [`MemTable::add_shadowing`]).
pub(crate) fn insert_into<'m>(
    mem: &'m MemTable,
    batch: &WriteBatch,
    mut shadowed: Option<&mut [Option<Shadowed<'m>>]>,
) -> Result<u64> {
    let mut bytes = 0u64;
    for (i, (seq, op)) in (batch.sequence()..).zip(batch.iter()).enumerate() {
        let op = op?;
        let (key, value) = (op.key(), op.value());
        bytes += (key.len() + value.len()) as u64;
        match shadowed.as_deref_mut() {
            Some(out) => {
                let sh = mem.add_shadowing(seq, op.kind(), key, value).1;
                if let Some(slot) = out.get_mut(i) {
                    *slot = sh;
                }
            }
            None => {
                mem.add(seq, op.kind(), key, value);
            }
        }
    }
    Ok(bytes)
}

/// The guards a batch's hooks returned, held until the batch is published:
/// usually one, kept without a list (a list was an allocation a put).
#[derive(Default)]
pub(crate) struct Guards<'h> {
    first: Option<BatchGuard<'h>>,
    more: Vec<BatchGuard<'h>>,
}

impl<'h> Extend<BatchGuard<'h>> for Guards<'h> {
    fn extend<I: IntoIterator<Item = BatchGuard<'h>>>(&mut self, iter: I) {
        for g in iter {
            if self.first.is_none() {
                self.first = Some(g);
            } else {
                self.more.push(g);
            }
        }
    }
}

/// Inserts `batch` into `mem`, the active memtable `cx.mems[0]`, with the
/// batch hooks around it: every hook's [`EngineHooks::before_batch`], the
/// insert (recording what each operation shadows when a hook wants it),
/// then [`EngineHooks::after_insert`] with the older components. The
/// hooks' guards go to `guards`; returns user bytes. The write leader and
/// the WAL replay both write through here.
pub(crate) fn insert_with_hooks<'h>(
    hooks: &'h [Arc<dyn EngineHooks>],
    mem: &MemTable,
    batch: &WriteBatch,
    cx: &BatchContext<'_>,
    guards: &mut Guards<'h>,
) -> Result<u64> {
    for h in hooks {
        guards.extend(h.before_batch(batch, cx)?);
    }
    if !hooks.iter().any(|h| h.wants_shadowed()) {
        return insert_into(mem, batch, None);
    }
    // A batch of one (most puts) records its entry on the stack.
    let mut one: [Option<Shadowed<'_>>; 1] = [None];
    let mut many = Vec::new();
    let shadowed: &mut [Option<Shadowed<'_>>] = if batch.len() == 1 {
        &mut one
    } else {
        many.resize_with(batch.len(), || None);
        &mut many
    };
    let bytes = insert_into(mem, batch, Some(&mut *shadowed))?;
    let shadowed: &[Option<Shadowed<'_>>] = shadowed;
    let older = BatchContext {
        mems: cx.mems.get(1..).unwrap_or_default(),
        ..*cx
    };
    for h in hooks {
        if h.wants_shadowed() {
            guards.extend(h.after_insert(batch, shadowed, &older)?);
        }
    }
    Ok(bytes)
}

impl DbInner {
    pub(crate) fn write(&self, mut batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        if !self.check_write(&batch, &opts)? {
            return Ok(());
        }
        match &self.host {
            Some(host) => self.write_hosted(&mut batch, opts, host),
            None => self.write_queued(batch, opts),
        }
    }

    /// [`DbInner::write`] leaving the batch's buffer with the caller,
    /// cleared: a hosted engine inserts it in place; another engine takes
    /// its contents.
    pub(crate) fn write_in_place(&self, batch: &mut WriteBatch, opts: WriteOptions) -> Result<()> {
        let Some(host) = &self.host else {
            return self.write(std::mem::take(batch), opts);
        };
        let result = match self.check_write(batch, &opts) {
            Ok(true) => self.write_hosted(batch, opts, host),
            other => other.map(drop),
        };
        batch.clear();
        result
    }

    /// Refuses a batch no write may apply (oversized key or value, merge
    /// operands without an operator or under an extension that refuses
    /// them, sequence numbers past the largest); false if it is empty.
    fn check_write(&self, batch: &WriteBatch, opts: &WriteOptions) -> Result<bool> {
        if validate_batch(batch)? {
            merge::require(self.opts.merge_operator.as_ref())?;
            if let Some(why) = self.hooks.iter().find_map(|h| h.refuses_merge_operands()) {
                return Err(Error::invalid(format!(
                    "merge operands are not supported here: {why}"
                )));
            }
        }
        if batch.is_empty() {
            return Ok(false);
        }
        if opts.min_sequence > key::MAX_SEQ - batch.len() as u64 {
            return Err(Error::invalid(format!(
                "write: minimum sequence number {} is past the largest {}",
                opts.min_sequence,
                key::MAX_SEQ
            )));
        }
        Ok(true)
    }

    /// The write of a checked, non-empty batch through the writer queue
    /// (an engine with a WAL of its own).
    fn write_queued(&self, batch: WriteBatch, opts: WriteOptions) -> Result<()> {
        let mut st = lock(&self.state);
        let w = Writer::reuse(st.spare_writer.take(), batch, opts.sync, opts.min_sequence);
        st.writers.push_back(w.clone());
        loop {
            if let Some(r) = lock(&w.result).take() {
                return r;
            }
            if st.writers.front().is_some_and(|f| Arc::ptr_eq(f, &w)) {
                break;
            }
            st = crate::sync::wait(&w.cv, st);
        }

        // Leader.
        let room = self.make_room_for_write(st, false);
        let st = match room {
            Ok(st) => st,
            Err(e) => {
                let mut st = lock(&self.state);
                st.writers.pop_front();
                wake_front(&st);
                return Err(e);
            }
        };
        let (group, mut merged, sync, floor) = self.build_group(&st);
        // The group starts after the last sequence and at or after every
        // member's floor (a floor applied to the whole group only moves
        // sequence numbers forward).
        let seq = (self.last_sequence.load(Ordering::SeqCst) + 1).max(floor);
        merged.set_sequence(seq);
        let count = merged.len() as u64;
        let mem = st.mem.clone();
        // The memtable's key-filter lines, asked for before the WAL and the
        // hooks' work, which their misses then overlap (the first few keys:
        // a large batch's inserts have work of their own between them).
        for op in merged.iter().take(PREPARED_INSERTS).flatten() {
            mem.prepare_insert(op.key());
        }
        // The extensions that see batches, and the components the batch will
        // shadow (memtables newest first, and the version; only the leader
        // changes their contents).
        // (Usually all of them, or none: no list is made then.)
        let subset: Vec<Arc<dyn EngineHooks>>;
        let batch_hooks: &[Arc<dyn EngineHooks>] = if self.hooks.iter().all(|h| h.wants_batches()) {
            &self.hooks
        } else {
            subset = self
                .hooks
                .iter()
                .filter(|h| h.wants_batches())
                .cloned()
                .collect();
            &subset
        };
        let version = (!batch_hooks.is_empty()).then(|| st.current.clone());
        let mut mems = version.is_some().then(|| lock(&self.batch_mems));
        if let Some(m) = mems.as_mut() {
            // Empty unless a hook panicked in the last write.
            m.clear();
            m.push(st.mem.clone());
            m.extend(st.imm.iter().rev().cloned());
        }
        drop(st);

        let result = (|| -> Result<()> {
            if !self.opts.wal {
                return Ok(());
            }
            let mut log = lock(&self.log);
            let log = log.as_mut().ok_or(Error::Closed)?;
            let n = log.add_record(merged.data())?;
            Counters::add(&self.counters.wal_bytes_written, n);
            if sync {
                log.sync()?;
            }
            Ok(())
        })();
        // Held until after the batch's last sequence is published (see the
        // module doc).
        let mut guards = Guards::default();
        let result = result.and_then(|()| {
            let bytes = match (&version, &mems) {
                (Some(version), Some(mems)) => {
                    let cx = BatchContext {
                        tables: &self.tables,
                        merge_operator: self.opts.merge_operator.as_ref(),
                        mems,
                        version,
                        recovering: false,
                    };
                    insert_with_hooks(batch_hooks, &mem, &merged, &cx, &mut guards)?
                }
                _ => insert_into(&mem, &merged, None)?,
            };
            Counters::add(&self.counters.user_bytes_written, bytes);
            Ok(())
        });

        // No memtable outlives its use through the kept list.
        if let Some(mut m) = mems {
            m.clear();
        }
        let mut st = lock(&self.state);
        if result.is_ok() {
            self.last_sequence.store(seq + count - 1, Ordering::SeqCst);
            drop(guards);
        } else if let Err(e) = &result {
            // The WAL may hold a partial record: refuse further writes.
            if st.bg_error.is_none() {
                st.bg_error = Some(e.clone());
            }
        }
        // The group is the queue's first `group` writers: only the leader
        // pops, and others only push at the back.
        for _ in 0..group {
            let Some(g) = st.writers.pop_front() else {
                break;
            };
            if !Arc::ptr_eq(&g, &w) {
                *lock(&g.result) = Some(result.clone());
                g.cv.notify_one();
            }
        }
        wake_front(&st);
        // Popped above: only this thread holds it (see `Writer::reuse`).
        st.spare_writer = Some(w);
        drop(st);
        if !self.opts.background_work {
            self.run_inline_work()?;
        }
        result
    }

    /// A hosted engine's write (see `crate::host`): straight into the
    /// memtable under the write mutex, published at once; asks the host
    /// to switch memtables when this one is full. No stall, no switch.
    fn write_hosted(
        &self,
        batch: &mut WriteBatch,
        opts: WriteOptions,
        host: &crate::host::HostedSet,
    ) -> Result<()> {
        let _w = lock(&self.hosted_write);
        let mem = {
            let st = lock(&self.state);
            if let Some(e) = &st.bg_error {
                return Err(Error::Background(e.to_string()));
            }
            if st.shutting_down {
                return Err(Error::Closed);
            }
            st.mem.clone()
        };
        let seq = (self.last_sequence.load(Ordering::SeqCst) + 1).max(opts.min_sequence);
        batch.set_sequence(seq);
        match insert_into(&mem, batch, None) {
            Ok(bytes) => Counters::add(&self.counters.user_bytes_written, bytes),
            Err(e) => {
                // Part of the batch may be in the memtable.
                self.set_bg_error(&e);
                return Err(e);
            }
        }
        self.last_sequence
            .store(seq + batch.len() as u64 - 1, Ordering::SeqCst);
        if mem.approximate_bytes() >= self.opts.memtable_size {
            host.request_switch();
        }
        Ok(())
    }

    /// Runs `f` while no write is in flight and none starts: a placeholder
    /// takes the front of the writer queue (so every group queued before it
    /// has been published) and keeps it until `f` returns. Index builds use
    /// it to scan the data and fill a structure that writers maintain from
    /// then on. The caller holds no lock the write path takes.
    pub(crate) fn pause_writes<T>(&self, f: impl FnOnce() -> T) -> T {
        drop(self.take_queue_front());
        let out = f();
        let mut st = lock(&self.state);
        st.writers.pop_front();
        wake_front(&st);
        drop(st);
        out
    }

    /// Queues a placeholder writer and returns once it is at the front of
    /// the writer queue (every group queued before it is published). It
    /// has no batch, so no leader absorbs it into a group; the caller must
    /// pop it from the front and notify when done.
    fn take_queue_front(&self) -> MutexGuard<'_, State> {
        let w = Writer::new(None, false, 0);
        let mut st = lock(&self.state);
        st.writers.push_back(w.clone());
        while !st.writers.front().is_some_and(|f| Arc::ptr_eq(f, &w)) {
            st = crate::sync::wait(&w.cv, st);
        }
        st
    }

    /// Takes the batches of the leader and the writers behind it. A writer
    /// that wants `sync` does not join a group led by one that does not
    /// (its fsync would be skipped).
    /// Switches to a new memtable (and WAL) if the current one is not
    /// empty, from the front of the writer queue: a write leader inserts
    /// into the memtable after releasing the state lock, so switching
    /// anywhere else could freeze (and flush) a memtable a leader is still
    /// filling, losing its entries from reads. The queued barrier has no
    /// batch, so no leader absorbs it into its group.
    pub(crate) fn force_switch_memtable(&self) -> Result<MutexGuard<'_, State>> {
        let st = self.take_queue_front();
        let room = self.make_room_for_write(st, true);
        let (mut st, result) = match room {
            Ok(st) => (st, Ok(())),
            Err(e) => (lock(&self.state), Err(e)),
        };
        st.writers.pop_front();
        wake_front(&st);
        result.map(|()| st)
    }

    /// The writers at the front of the queue that form the leader's group:
    /// how many, their batches merged, whether it syncs, and the largest
    /// sequence floor among them.
    fn build_group(&self, st: &State) -> (usize, WriteBatch, bool, SeqNo) {
        let mut group = 0usize;
        let mut floor: SeqNo = 0;
        // The leader's own batch becomes the group's (no copy for a group
        // of one); followers' batches are appended to it.
        let mut merged: Option<WriteBatch> = None;
        let leader_sync = st.writers.front().is_some_and(|w| w.sync);
        let mut size = 0usize;
        for w in st.writers.iter() {
            if group > 0 && w.sync && !leader_sync {
                break;
            }
            let mut b = lock(&w.batch);
            let Some(batch) = b.as_ref() else { break };
            if group > 0 && size + batch.encoded_len() > MAX_GROUP_BYTES {
                break;
            }
            size += batch.encoded_len();
            match merged.as_mut() {
                Some(m) => {
                    m.append(batch);
                    *b = None;
                }
                None => merged = b.take(),
            }
            group += 1;
            floor = floor.max(w.min_seq);
        }
        (group, merged.unwrap_or_default(), leader_sync, floor)
    }

    /// Ensures the memtable has room, switching to a new memtable and WAL
    /// when it is full (or when `force` and it is not empty). Applies L0
    /// back-pressure: one 1 ms delay per write at the slowdown trigger, a
    /// wait for compaction at the stop trigger.
    pub(crate) fn make_room_for_write<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        mut force: bool,
    ) -> Result<MutexGuard<'a, State>> {
        let mut allow_delay = !force;
        loop {
            if let Some(e) = &st.bg_error {
                return Err(Error::Background(e.to_string()));
            }
            if st.shutting_down {
                return Err(Error::Closed);
            }
            // Hosted engines' L0 counts too: this engine compacts them.
            let l0 = self
                .picker
                .l0_pressure(&st.current)
                .max(self.hosted.l0_pressure());
            if allow_delay && l0 >= self.opts.l0_slowdown_trigger && self.opts.background_work {
                drop(st);
                let t = Instant::now();
                std::thread::sleep(Duration::from_millis(1));
                Counters::add(
                    &self.counters.write_stall_micros,
                    t.elapsed().as_micros() as u64,
                );
                allow_delay = false;
                st = lock(&self.state);
                continue;
            }
            if !force
                && st.mem.approximate_bytes() < self.opts.memtable_size
                && !self.hosted.switch_requested()
            {
                return Ok(st);
            }
            if force && st.mem.is_empty() {
                return Ok(st);
            }
            if st.imm.len() >= self.opts.max_immutable_memtables {
                st = self.wait_for_background(st)?;
                continue;
            }
            if l0 >= self.opts.l0_stop_trigger {
                st = self.wait_for_background(st)?;
                continue;
            }
            self.switch_memtable(&mut st)?;
            force = false;
        }
    }

    /// Blocks until background work installs a version or fails (or runs
    /// it inline): the only events that can end a stall.
    fn wait_for_background<'a>(
        &'a self,
        st: MutexGuard<'a, State>,
    ) -> Result<MutexGuard<'a, State>> {
        if self.opts.background_work {
            let t = Instant::now();
            let st = crate::sync::wait(&self.bg_done, st);
            Counters::add(
                &self.counters.write_stall_micros,
                t.elapsed().as_micros() as u64,
            );
            Ok(st)
        } else {
            drop(st);
            self.run_inline_work()?;
            Ok(lock(&self.state))
        }
    }

    /// Freezes the memtable and starts a new WAL file for its successor.
    /// The old WAL is fsynced first, so that recovery after a crash yields a
    /// prefix of the acknowledged writes even without `sync`.
    fn switch_memtable(&self, st: &mut State) -> Result<()> {
        let number = self.next_file.fetch_add(1, Ordering::SeqCst);
        let path = filename::log_file(&self.dir, number);
        let file = self
            .opts
            .fs
            .create_log(&path, self.opts.wal && self.opts.wal_mmap)
            .path_ctx("create WAL", &path)?;
        let mut log = lock(&self.log);
        if let Some(old) = log.as_mut() {
            old.finish()?;
        }
        *log = Some(LogWriter::new(file, path, 0).sync_dir_first(self.opts.fs.clone()));
        drop(log);
        let new_mem = self.new_memtable(number);
        let old = std::mem::replace(&mut st.mem, new_mem);
        st.imm.push_back(old);
        // Hosted memtables switch with this one (see `crate::host`).
        self.hosted.freeze_all();
        // The only event the flush thread waits for.
        self.flush_cv.notify_one();
        Ok(())
    }
}
