//! Pacing of online index builds against foreground writes.
//!
//! An online build (NEXT §5's lazy construction, and the snapshot scans of
//! the other strategies) runs on the caller's thread beside the writers and
//! the compactions they cause. On a machine with few cores a build at full
//! speed takes a core the writers need. The pacer gives the build a duty
//! cycle while writes run: after each slice of work (about
//! [`SLICE`] of busy time), if the database's last sequence number moved
//! during the slice, the build sleeps `share` times the slice's length, so
//! it uses at most `1 / (1 + share)` of a core while writers are active and
//! runs at full speed when none are. `share = 0` turns pacing off.
//!
//! Contract: the pacer only delays; it never changes what a build reads or
//! writes, so a paced build is exactly the unpaced one, later.

use std::time::{Duration, Instant};

use strata_lsm::key::SeqNo;

/// Busy time between two checks for writes.
pub(crate) const SLICE: Duration = Duration::from_millis(4);

/// The longest single sleep (bounds the delay a burst of writes adds).
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// Duty cycle of one build (see the module doc).
pub(crate) struct Pacer<F: Fn() -> SeqNo> {
    share: f64,
    last_sequence: F,
    seen: SeqNo,
    slice_start: Instant,
    /// Time slept so far (reported by builds that measure themselves).
    pub slept: Duration,
}

impl<F: Fn() -> SeqNo> Pacer<F> {
    /// A pacer sleeping `share` times its busy time while `last_sequence`
    /// (the database's newest sequence number) advances.
    pub fn new(share: f64, last_sequence: F) -> Pacer<F> {
        let seen = last_sequence();
        Pacer {
            share: if share.is_finite() {
                share.max(0.0)
            } else {
                0.0
            },
            last_sequence,
            seen,
            slice_start: Instant::now(),
            slept: Duration::ZERO,
        }
    }

    /// Called by the build after each small unit of work (a data block, a
    /// chunk of records): ends the slice once it is [`SLICE`] long, and
    /// sleeps if writes happened during it.
    pub fn step(&mut self) {
        if self.share == 0.0 {
            return;
        }
        let busy = self.slice_start.elapsed();
        if busy < SLICE {
            return;
        }
        let now = (self.last_sequence)();
        if now != self.seen {
            self.seen = now;
            let pause = busy.mul_f64(self.share).min(MAX_SLEEP);
            std::thread::sleep(pause);
            self.slept += pause;
        }
        self.slice_start = Instant::now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    fn busy(d: Duration) {
        let t = Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn sleeps_only_while_the_sequence_moves() {
        let seq = AtomicU64::new(1);
        let mut p = Pacer::new(1.0, || seq.load(Relaxed));
        // No writes: never sleeps.
        for _ in 0..5 {
            busy(SLICE);
            p.step();
        }
        assert_eq!(p.slept, Duration::ZERO);
        // Writes during each slice: sleeps about the slice's length.
        for _ in 0..5 {
            busy(SLICE);
            seq.fetch_add(1, Relaxed);
            p.step();
        }
        assert!(p.slept >= SLICE * 5, "slept {:?}", p.slept);
    }

    #[test]
    fn share_zero_never_sleeps() {
        let seq = AtomicU64::new(1);
        let mut p = Pacer::new(0.0, || seq.load(Relaxed));
        for _ in 0..3 {
            busy(SLICE);
            seq.fetch_add(1, Relaxed);
            p.step();
        }
        assert_eq!(p.slept, Duration::ZERO);
    }
}
