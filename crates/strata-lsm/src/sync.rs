//! Lock helpers: one place decides what a poisoned lock means. And the
//! helper threads of one query's parallel work ([`on_threads`]).
//!
//! A panic while a lock is held cannot leave the data behind it
//! inconsistent in this crate's uses (each critical section either
//! completes its update or the panic aborts the operation that would have
//! published it), so a poisoned lock is taken as is.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks `m`, ignoring poisoning.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read-locks `l`, ignoring poisoning.
pub fn read<T: ?Sized>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Write-locks `l`, ignoring poisoning.
pub fn write<T: ?Sized>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Waits on `cv`, releasing `guard` meanwhile; returns the guard re-taken,
/// ignoring poisoning (spurious wake-ups are possible: callers loop).
pub fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(|e| e.into_inner())
}

/// Runs `work` on the calling thread and on `threads - 1` helpers from a
/// shared pool (rayon's global pool, started once), and returns each run's
/// result, the caller's first; with `threads <= 1` on the caller alone.
///
/// Contract: `work` takes its units from a shared queue and returns when
/// the queue is empty, so the caller never waits for work a busy pool has
/// not started: a helper that starts late finds the queue empty and
/// returns at once. A panic in a helper is resumed on the caller once
/// every run has ended.
pub fn on_threads<T: Send>(threads: usize, work: impl Fn() -> T + Sync) -> Vec<T> {
    if threads <= 1 {
        return vec![work()];
    }
    let helpers: Mutex<Vec<T>> = Mutex::new(Vec::with_capacity(threads - 1));
    let mine = rayon::in_place_scope(|s| {
        for _ in 1..threads {
            s.spawn(|_| {
                let r = work();
                lock(&helpers).push(r);
            });
        }
        work()
    });
    let mut out = Vec::with_capacity(threads);
    out.push(mine);
    out.append(&mut lock(&helpers));
    out
}

/// Runs `f(unit, state)` for every unit in `0..units` on `threads`
/// workers ([`on_threads`]) that pull the next unit from one shared atomic
/// cursor, each with its own state from `init`; returns the workers'
/// states (the caller's first). The first error stops the other workers
/// and is returned.
pub fn each_unit<S: Send>(
    threads: usize,
    units: usize,
    init: impl Fn() -> S + Sync,
    f: impl Fn(usize, &mut S) -> crate::error::Result<()> + Sync,
) -> crate::error::Result<Vec<S>> {
    let next = AtomicUsize::new(0);
    let work = || {
        let mut state = init();
        loop {
            let u = next.fetch_add(1, Ordering::Relaxed);
            if u >= units {
                return Ok(state);
            }
            if let Err(e) = f(u, &mut state) {
                next.store(units, Ordering::Relaxed);
                return Err(e);
            }
        }
    };
    on_threads(threads.clamp(1, units.max(1)), work)
        .into_iter()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_unit_is_taken_once_whatever_the_threads() {
        for threads in [0, 1, 2, 3, 8] {
            let next = AtomicUsize::new(0);
            let runs = on_threads(threads, || {
                let mut mine = Vec::new();
                loop {
                    let u = next.fetch_add(1, Ordering::Relaxed);
                    if u >= 1000 {
                        return mine;
                    }
                    mine.push(u);
                }
            });
            assert_eq!(runs.len(), threads.max(1));
            let mut all: Vec<usize> = runs.into_iter().flatten().collect();
            all.sort_unstable();
            assert_eq!(all, (0..1000).collect::<Vec<_>>());
        }
    }

    #[test]
    fn each_unit_visits_every_unit_once_and_stops_at_an_error() {
        for threads in [1, 2, 5] {
            let states = each_unit(threads, 500, Vec::new, |u, v: &mut Vec<usize>| {
                v.push(u);
                Ok(())
            })
            .unwrap_or_default();
            let mut all: Vec<usize> = states.into_iter().flatten().collect();
            all.sort_unstable();
            assert_eq!(all, (0..500).collect::<Vec<_>>());
            let failed = each_unit(
                threads,
                500,
                || (),
                |u, _| {
                    if u == 7 {
                        Err(crate::error::Error::invalid("unit 7"))
                    } else {
                        Ok(())
                    }
                },
            );
            assert!(failed.is_err());
        }
    }
}
