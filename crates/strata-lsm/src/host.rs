//! Hosted engines: LSM trees that live as column families of another
//! engine, their *host*.
//!
//! An engine opened with [`crate::Options::host`] (a *hosted* engine; the
//! host is named by a [`crate::hooks::HostRef`]) has
//! no WAL, no threads and no writer queue of its own. Its host drives it:
//!
//! * **Writes** are inserted into its memtable directly, serialized by one
//!   mutex, by whoever writes (for `strata`'s stand-alone indexes: the
//!   host's write leader, inside the host's group commit, before the
//!   host's batch is published). A write never switches its memtable and
//!   never stalls; it only asks the host to switch when the memtable is
//!   full.
//! * **Memtables are switched together**: whenever the host freezes its
//!   memtable (full, or a flush), it freezes every hosted memtable in the
//!   same step, so a hosted engine's frozen memtables hold only writes
//!   made before the host's switch.
//! * **Flushed together**: before the host installs a flush — which
//!   retires WAL files — it flushes every hosted engine's frozen
//!   memtables, after making its own WAL durable. Whatever a retired WAL
//!   held is then in durable hosted tables, and every hosted table
//!   installs only after the host's WAL is durable, so nothing durable in
//!   a hosted engine is newer than the host's durable WAL.
//! * **Compacted by one engine**: the host's compaction thread runs the
//!   hosted engines' compactions (each picked by that engine's own policy)
//!   after its own, and the host's writers stall on the largest L0
//!   pressure of the host and its hosted engines.
//!
//! Each hosted engine keeps its own directory, MANIFEST and sequence
//! numbers; what it holds in memtables at a crash is rebuilt by its owner
//! from the host's WAL (see `strata`'s `index/tree.rs`). This is AsterixDB's
//! design for an LSM dataset and its secondary indexes (Luo & Carey §3:
//! one log, memtables flushed together).
//!
//! Lock order: a host's state lock, then the set's member list, then a
//! hosted engine's write mutex, then its state lock. A hosted engine never
//! takes a lock of its host except the host's WAL (to make it durable
//! before installing tables).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::error::Result;
use crate::sync::lock;

/// What a host asks of a hosted engine.
pub(crate) trait HostedEngine: Send + Sync {
    /// Freezes the memtable if it holds anything (a no-op after close).
    fn freeze(&self);
    /// Writes every frozen memtable to a table, in the calling thread.
    fn flush_frozen(&self) -> Result<()>;
    /// Runs one compaction if the engine's policy picks one; false if none
    /// was needed (or the engine is closed or compacting manually).
    fn compact_step(&self) -> Result<bool>;
    /// The engine's L0 pressure as of its last install.
    fn l0_pressure(&self) -> usize;
}

/// A host's hosted engines, and what they ask of it.
#[derive(Default)]
pub(crate) struct HostedSet {
    /// Weak: a hosted engine closed by its owner drops out by itself.
    members: Mutex<Vec<Weak<dyn HostedEngine>>>,
    /// A hosted memtable reached its size budget.
    switch_requested: AtomicBool,
    /// Largest L0 pressure of the members, as of their last installs.
    l0_pressure: AtomicUsize,
}

impl HostedSet {
    pub(crate) fn register(&self, engine: Weak<dyn HostedEngine>) {
        let mut m = lock(&self.members);
        m.retain(|w| w.strong_count() > 0);
        m.push(engine);
    }

    /// The members still open.
    pub(crate) fn live(&self) -> Vec<Arc<dyn HostedEngine>> {
        lock(&self.members)
            .iter()
            .filter_map(Weak::upgrade)
            .collect()
    }

    pub(crate) fn request_switch(&self) {
        self.switch_requested.store(true, Ordering::Release);
    }

    pub(crate) fn switch_requested(&self) -> bool {
        self.switch_requested.load(Ordering::Acquire)
    }

    /// Freezes every member's memtable (the host just froze its own).
    pub(crate) fn freeze_all(&self) {
        self.switch_requested.store(false, Ordering::Release);
        for e in self.live() {
            e.freeze();
        }
    }

    /// Flushes every member's frozen memtables.
    pub(crate) fn flush_all(&self) -> Result<()> {
        self.live().iter().try_for_each(|e| e.flush_frozen())
    }

    /// Runs at most one compaction per member; true if any ran.
    pub(crate) fn compact_round(&self) -> Result<bool> {
        let mut ran = false;
        for e in self.live() {
            ran |= e.compact_step()?;
        }
        Ok(ran)
    }

    /// Recomputes the members' largest L0 pressure (a member installed).
    pub(crate) fn refresh_l0(&self) {
        let max = self
            .live()
            .iter()
            .map(|e| e.l0_pressure())
            .max()
            .unwrap_or(0);
        self.l0_pressure.store(max, Ordering::Release);
    }

    pub(crate) fn l0_pressure(&self) -> usize {
        self.l0_pressure.load(Ordering::Acquire)
    }
}
