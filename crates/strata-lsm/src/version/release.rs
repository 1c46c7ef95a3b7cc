//! The signal that a version died, which wakes obsolete-file deletion.
//!
//! Every version a [`super::VersionSet`] hands out carries the set's
//! signal; dropping a version raises it. A file leaves the directory only
//! when no live version holds it, so a version's death is the one event
//! after which a file can become deletable (besides an install, which the
//! installer handles itself).
//!
//! The signal's lock is a leaf: it is taken while any other lock may be
//! held (a version can die anywhere) and nothing else is taken under it.

use std::sync::{Condvar, Mutex};

use crate::sync::{lock, wait};

#[derive(Default)]
struct SignalState {
    /// A version died since the deleter last started a pass.
    pending: bool,
    /// The deleter is in a pass.
    running: bool,
    /// The database is closing: waiters return.
    stopped: bool,
}

/// Raised when a version dies; awaited by the obsolete-file deleter.
#[derive(Default)]
pub struct ReleaseSignal {
    state: Mutex<SignalState>,
    work: Condvar,
    idle: Condvar,
}

impl ReleaseSignal {
    /// A lowered signal.
    pub fn new() -> ReleaseSignal {
        ReleaseSignal::default()
    }

    /// Records that a version died and wakes the deleter.
    pub fn raise(&self) {
        let mut s = lock(&self.state);
        s.pending = true;
        self.work.notify_one();
    }

    /// For the deleter: blocks until the signal is raised, lowers it and
    /// marks a pass running (end it with [`ReleaseSignal::pass_done`]).
    /// Returns false once stopped.
    pub fn wait_for_work(&self) -> bool {
        let mut s = lock(&self.state);
        while !s.pending && !s.stopped {
            s = wait(&self.work, s);
        }
        if s.stopped {
            return false;
        }
        s.pending = false;
        s.running = true;
        true
    }

    /// For the deleter: the pass started by `wait_for_work` is over.
    pub fn pass_done(&self) {
        let mut s = lock(&self.state);
        s.running = false;
        if !s.pending {
            self.idle.notify_all();
        }
    }

    /// Without a deleter thread: lowers the signal, returning whether it
    /// was raised (the caller then runs a pass itself).
    pub fn take(&self) -> bool {
        std::mem::take(&mut lock(&self.state).pending)
    }

    /// Blocks until the deleter has finished every pass the deaths so far
    /// call for (or the signal is stopped).
    pub fn wait_idle(&self) {
        let mut s = lock(&self.state);
        while (s.pending || s.running) && !s.stopped {
            s = wait(&self.idle, s);
        }
    }

    /// Stops the deleter and releases every waiter.
    pub fn stop(&self) {
        let mut s = lock(&self.state);
        s.stopped = true;
        self.work.notify_all();
        self.idle.notify_all();
    }
}
