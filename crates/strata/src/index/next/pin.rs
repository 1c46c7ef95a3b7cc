//! Secondary blocks kept in RAM (the `pin` parameter) and the budget they
//! are charged to.
//!
//! A NEXT query reads one secondary block in each table that holds a
//! match. Through the block cache those reads compete with data blocks,
//! and an index larger than the cache's share misses on most of them (an
//! equality top-10 query on 2 M tweets read 3.5 of its 4.5 secondary
//! blocks from the file). Pinned, a table's secondary blocks stay in RAM
//! for the table's life in the index, like the table readers' index and
//! filter blocks of RocksDB's default configuration, but within a budget
//! per index: a table is pinned whole if its blocks fit what is left of
//! the budget when it is installed (a flush, a compaction, an online
//! build's side file, or open), else it is read through the cache. Its
//! charge is returned when the table leaves the index.
//!
//! Invariant: a [`PinBudget`]'s `used` is the sum of its live
//! [`Charge`]s, and never exceeds its limit.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use strata_lsm::error::{Error, Result};

/// Default budget of pinned secondary blocks per index: 256 MiB.
pub const DEFAULT_PIN_BUDGET: usize = 256 << 20;

/// What the `pin` parameter asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinPolicy {
    /// Never pin (`pin=false`).
    Off,
    /// Pin tables while their blocks fit this many bytes (`pin=N`, with a
    /// `KiB`, `MiB` or `GiB` suffix or bytes; the default
    /// [`DEFAULT_PIN_BUDGET`]).
    Budget(usize),
    /// Pin every table (`pin=true`).
    All,
}

impl PinPolicy {
    /// Parses the `pin` parameter: `true`, `false`, or a size.
    pub fn parse(v: &str) -> Result<PinPolicy> {
        let bad = || {
            Error::invalid(format!(
                "pin must be true, false or a size (bytes, or a number with KiB, MiB or GiB), not {v:?}"
            ))
        };
        match v {
            "true" => return Ok(PinPolicy::All),
            "false" => return Ok(PinPolicy::Off),
            _ => {}
        }
        let (num, unit) = match v.find(|c: char| !c.is_ascii_digit()) {
            Some(i) => v.split_at(i),
            None => (v, ""),
        };
        let shift = match unit.trim() {
            "" => 0,
            "KiB" => 10,
            "MiB" => 20,
            "GiB" => 30,
            _ => return Err(bad()),
        };
        let n: usize = num.parse().map_err(|_| bad())?;
        let bytes = n.checked_mul(1usize << shift).ok_or_else(bad)?;
        Ok(if bytes == 0 {
            PinPolicy::Off
        } else {
            PinPolicy::Budget(bytes)
        })
    }
}

impl Default for PinPolicy {
    fn default() -> Self {
        PinPolicy::Budget(DEFAULT_PIN_BUDGET)
    }
}

/// The bytes of one index's pinned blocks: the limit and what live
/// charges hold.
#[derive(Debug)]
pub struct PinBudget {
    /// `None`: no limit (`pin=true`).
    limit: Option<usize>,
    used: AtomicUsize,
}

impl PinBudget {
    /// The budget `policy` asks for; `None` for [`PinPolicy::Off`].
    pub fn of(policy: PinPolicy) -> Option<Arc<PinBudget>> {
        let limit = match policy {
            PinPolicy::Off => return None,
            PinPolicy::Budget(n) => Some(n),
            PinPolicy::All => None,
        };
        Some(Arc::new(PinBudget {
            limit,
            used: AtomicUsize::new(0),
        }))
    }

    /// A charge of `bytes`, if they fit what is left (`None`: the table is
    /// not pinned).
    pub fn reserve(self: &Arc<Self>, bytes: usize) -> Option<Charge> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let next = cur.checked_add(bytes)?;
            if self.limit.is_some_and(|l| next > l) {
                return None;
            }
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    return Some(Charge {
                        budget: self.clone(),
                        bytes,
                    })
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Bytes charged now.
    #[cfg(test)]
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

/// Bytes held against a [`PinBudget`], returned when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<PinBudget>,
    bytes: usize,
}

impl Charge {
    /// The charge cut down to `bytes` (if it holds more), the rest
    /// returned to the budget.
    pub fn trim(mut self, bytes: usize) -> Charge {
        if let Some(extra) = self.bytes.checked_sub(bytes) {
            self.budget.used.fetch_sub(extra, Ordering::AcqRel);
            self.bytes = bytes;
        }
        self
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// One table's secondary blocks in RAM, by block number, with their
/// charge.
#[derive(Debug)]
pub struct Pinned {
    blocks: Vec<Box<[u8]>>,
    _charge: Charge,
}

impl Pinned {
    /// `blocks` under `charge` (which must cover their bytes).
    pub fn new(blocks: Vec<Box<[u8]>>, charge: Charge) -> Pinned {
        debug_assert!(blocks.iter().map(|b| b.len()).sum::<usize>() <= charge.bytes);
        Pinned {
            blocks,
            _charge: charge,
        }
    }

    /// Secondary block `b`.
    pub fn get(&self, b: usize) -> Option<&[u8]> {
        self.blocks.get(b).map(|b| &**b)
    }

    /// Bytes of RAM held.
    pub fn memory_bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.len() + 16).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_booleans_and_sizes() {
        assert_eq!(PinPolicy::parse("true").unwrap(), PinPolicy::All);
        assert_eq!(PinPolicy::parse("false").unwrap(), PinPolicy::Off);
        assert_eq!(PinPolicy::parse("0").unwrap(), PinPolicy::Off);
        assert_eq!(PinPolicy::parse("4096").unwrap(), PinPolicy::Budget(4096));
        assert_eq!(
            PinPolicy::parse("8KiB").unwrap(),
            PinPolicy::Budget(8 << 10)
        );
        assert_eq!(
            PinPolicy::parse("256MiB").unwrap(),
            PinPolicy::Budget(256 << 20)
        );
        assert_eq!(
            PinPolicy::parse("2GiB").unwrap(),
            PinPolicy::Budget(2 << 30)
        );
        for bad in [
            "",
            "yes",
            "12MB",
            "-1",
            "MiB",
            "1.5MiB",
            "99999999999999999999GiB",
        ] {
            let e = PinPolicy::parse(bad).unwrap_err().to_string();
            assert!(e.contains("pin must be"), "{bad}: {e}");
        }
    }

    #[test]
    fn charges_stay_within_the_budget_and_return_when_dropped() {
        let b = PinBudget::of(PinPolicy::Budget(100)).unwrap();
        let c1 = b.reserve(60).unwrap();
        assert!(b.reserve(41).is_none());
        let c2 = b.reserve(40).unwrap();
        assert_eq!(b.used(), 100);
        assert!(b.reserve(1).is_none());
        drop(c1);
        assert_eq!(b.used(), 40);
        let c3 = b.reserve(60).unwrap().trim(50);
        assert_eq!(b.used(), 90);
        drop(c2);
        assert_eq!(b.used(), 50);
        drop(c3);
        assert_eq!(b.used(), 0);
        let all = PinBudget::of(PinPolicy::All).unwrap();
        let _big = all.reserve(usize::MAX / 2).unwrap();
        assert!(PinBudget::of(PinPolicy::Off).is_none());
    }
}
