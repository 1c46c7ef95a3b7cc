//! Inserts random keys (8-byte secondary key ‖ 8-byte id, empty values:
//! a composite index's entries) into one memtable and prints the time an
//! insert and a full in-order walk (what a flush reads) take:
//!
//! ```sh
//! cargo run --release -p strata-lsm --example memtable_insert -- [N] [RUN_ENTRIES]
//! ```
//!
//! `RUN_ENTRIES` 0 (the default) is one skiplist; otherwise runs mode
//! (`MemTable::with_runs`). See `docs/benchmarks.md`, session 39.

use std::time::Instant;

use strata_lsm::key::ValueKind;
use strata_lsm::memtable::MemTable;

fn arg(i: usize, default: usize) -> Result<usize, String> {
    match std::env::args().nth(i) {
        Some(s) => s.parse().map_err(|e| format!("argument {i} ({s:?}): {e}")),
        None => Ok(default),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = arg(1, 1_000_000)?;
    let run_entries = arg(2, 0)?;
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let keys: Vec<[u8; 16]> = (0..n as u64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut k = [0u8; 16];
            k[..8].copy_from_slice(&(x % 100_000).to_be_bytes());
            k[8..].copy_from_slice(&(i * 7919 + 1_000_000_000_000).to_be_bytes());
            k
        })
        .collect();
    let mem = MemTable::new(1).with_runs(run_entries);
    let t = Instant::now();
    for (seq, k) in (1..).zip(&keys) {
        mem.add(seq, ValueKind::Value, k, b"");
    }
    let insert = t.elapsed().as_nanos() as f64 / n.max(1) as f64;
    let t = Instant::now();
    let mut walked = 0usize;
    mem.for_each(|k, _| {
        walked += k.len();
        Ok(())
    })?;
    let walk = t.elapsed().as_nanos() as f64 / n.max(1) as f64;
    println!(
        "{n} entries, run_entries {run_entries} ({} runs): insert {insert:.1} ns, walk {walk:.1} ns an entry ({walked} key bytes)",
        mem.sorted_runs()
    );
    Ok(())
}
