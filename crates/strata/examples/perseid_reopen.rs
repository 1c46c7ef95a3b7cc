//! Measures what a reopen of a database with a `perseid` index costs: the
//! close (drop) and the open, and whether the open rebuilt the index.
//! Records as PERSEID §5.1 (random 64-bit primary and secondary keys,
//! about 25 records per secondary key), upsert-uniform (half the writes
//! update a random live key).
//!
//! `cargo run --release -p strata --example perseid_reopen -- DIR N VALUE_BYTES`
//! (then again with `open-only` as a fourth argument to time only an open,
//! for example under `valgrind --tool=callgrind`).

use std::time::Instant;

use strata::{Db, IndexSpec, KeyType, Options};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).ok_or("DIR")?);
    let n: u64 = args.get(2).map_or(Ok(200_000), |s| s.parse())?;
    let value_bytes: usize = args.get(3).map_or(Ok(100), |s| s.parse())?;
    let open_only = args.get(4).is_some_and(|a| a == "open-only");
    let opts = Options::paper();
    if !open_only {
        let _ = std::fs::remove_dir_all(&dir);
        let db = Db::open(&dir, opts.clone())?;
        db.create_index(IndexSpec::field("by_s", "s", KeyType::I64).strategy("perseid"))?;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut keys: Vec<u64> = Vec::new();
        let pad = "x".repeat(value_bytes);
        let skeys = (n / 2 / 25).max(1);
        let t = Instant::now();
        for _ in 0..n {
            let pk = if keys.len() > 16 && rnd() % 2 == 0 {
                keys[(rnd() % keys.len() as u64) as usize]
            } else {
                let k = rnd();
                keys.push(k);
                k
            };
            // Secondary keys: `skeys` random 64-bit values.
            let s = (rnd() % skeys).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 1;
            let v = format!(r#"{{"s": {s}, "pad": "{pad}"}}"#);
            db.put(format!("{pk:016x}").as_bytes(), v.as_bytes())?;
        }
        db.flush()?;
        db.engine().wait_for_compactions()?;
        eprintln!("load: {:?}", t.elapsed());
        let t = Instant::now();
        drop(db);
        eprintln!("close: {:?}", t.elapsed());
    }
    let t = Instant::now();
    let db = Db::open(&dir, opts)?;
    let open = t.elapsed();
    let s = &db.indexes()[0].stats;
    eprintln!(
        "open: {open:?}; index RAM {} B, file {} B, entries {}",
        s.memory_bytes, s.disk_bytes, s.global_entries
    );
    let t = Instant::now();
    drop(db);
    eprintln!("close: {:?}", t.elapsed());
    Ok(())
}
