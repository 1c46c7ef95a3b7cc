//! Ingest of a JSONL file for profiles of the write path (issue #12's
//! ingest target), without the data generation of `strata bench run`.
//!
//! ```sh
//! strata gen tweets --records 200000 --out tweets.jsonl
//! cargo build --release -p strata --example ingest_profile
//! valgrind --tool=callgrind --separate-threads=yes \
//!   target/release/examples/ingest_profile tweets.jsonl DIR next
//! ```
//!
//! Puts every line of FILE (key: its line number, 8 bytes big-endian)
//! into a new database in DIR (`Options::paper()`), with `user_id` (i64)
//! and `coordinates` (point) indexes of STRATEGY (`none`: no index), then
//! waits for flushes and compactions. Prints the load and settle times.
//! With `UPDATES=N` in the environment, N puts of random existing keys
//! follow the load (each with another line's record). With
//! `INDEXES=field:type,...` (types `i64`, `f64`, `string`, `point`), those
//! fields are indexed instead (`INDEXES=created_at:i64` for the range
//! filter's time-range experiment).

use std::io::BufRead;
use std::time::Instant;

use strata::{Db, IndexSpec, KeyType, Options};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let (Some(file), Some(dir)) = (args.next(), args.next()) else {
        return Err("usage: ingest_profile FILE DIR [STRATEGY]".into());
    };
    let strategy = args.next().unwrap_or_else(|| "next".into());
    let lines: Vec<Vec<u8>> = std::io::BufReader::new(std::fs::File::open(&file)?)
        .split(b'\n')
        .filter(|l| l.as_ref().map_or(true, |l| !l.is_empty()))
        .collect::<std::io::Result<_>>()?;
    let db = Db::open(&dir, Options::paper().error_if_exists(true))?;
    if strategy != "none" {
        let spec =
            std::env::var("INDEXES").unwrap_or_else(|_| "user_id:i64,coordinates:point".into());
        for item in spec.split(',') {
            let (name, ty) = item
                .split_once(':')
                .ok_or_else(|| format!("INDEXES: expected field:type, got {item:?}"))?;
            let ty = match ty {
                "i64" => KeyType::I64,
                "f64" => KeyType::F64,
                "string" => KeyType::String,
                "point" => KeyType::Point,
                other => return Err(format!("INDEXES: unknown type {other:?}").into()),
            };
            db.create_index(IndexSpec::field(name, name, ty).strategy(&strategy))?;
        }
    }
    let t = Instant::now();
    for (i, line) in lines.iter().enumerate() {
        db.put(&(i as u64).to_be_bytes(), line)?;
    }
    let load = t.elapsed();
    // UPDATES=N: then N puts of existing keys (SplitMix64 order), each
    // with another line's record (a new attribute value).
    let updates: u64 = std::env::var("UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let n = lines.len() as u64;
    let tu = Instant::now();
    let mut state = 7u64;
    for _ in 0..updates {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let (k, l) = (z % n.max(1), (z >> 32) % n.max(1));
        if let Some(line) = lines.get(l as usize) {
            db.put(&k.to_be_bytes(), line)?;
        }
    }
    if updates > 0 {
        println!("{updates} updates in {:.3} s", tu.elapsed().as_secs_f64());
    }
    db.flush()?;
    db.wait_for_compactions()?;
    println!(
        "{strategy}: {} records, load {:.3} s, load + settle {:.3} s",
        lines.len(),
        load.as_secs_f64(),
        t.elapsed().as_secs_f64()
    );
    let io = db.stats().io;
    println!(
        "flushes {} ({} MB), compactions {} (read {} MB, written {} MB)",
        io.flushes,
        io.flush_bytes_written >> 20,
        io.compactions,
        io.compaction_bytes_read >> 20,
        io.compaction_bytes_written >> 20
    );
    Ok(())
}
