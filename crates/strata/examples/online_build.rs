//! Online index build against the full-compaction build it replaces (issue
//! #14 item 1), on the same data.
//!
//! ```sh
//! cargo run --release -p strata --example online_build -- [RECORDS] [DIR] [SHARE]
//! ```
//!
//! Loads RECORDS (default 200000) JSON records (~150 B, 20% of them
//! updated once) into DIR (default: a temporary directory), waits for
//! compactions, and copies the database twice. Then:
//!
//! 1. **writer alone**: one writer (puts of existing keys, new `user_id`)
//!    runs for 3 s: its throughput without a build;
//! 2. **online build with the writer**: the writer runs while a NEXT index
//!    on `user_id` is created; throughput during the build, build time,
//!    bytes the build wrote (its side files) against the data size, and
//!    the engine's table bytes written meanwhile (the writer's flushes and
//!    compactions);
//! 3. the writer again for 3 s, the index now maintained by every write;
//! 4. on the copies, without a writer: the online build and today's
//!    full-compaction build (`create_index_rewriting`), times and bytes
//!    written.
//!
//! Prints one line per measurement.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use strata::{Db, IndexSpec, KeyType, Options};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn doc(user: u64, i: u64) -> Vec<u8> {
    format!(
        r#"{{"user_id": {user}, "i": {i}, "text": "{}"}}"#,
        "lorem ipsum dolor sit amet ".repeat(4)
    )
    .into_bytes()
}

/// SplitMix64.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("k{i:010}").into_bytes()
}

fn data_bytes(db: &Db) -> u64 {
    db.current_version()
        .all_files()
        .map(|(_, f)| f.file_size)
        .sum()
}

fn side_bytes(dir: &Path) -> Res<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_name().to_string_lossy().contains(".idx") {
            n += e.metadata()?.len();
        }
    }
    Ok(n)
}

fn copy_dir(from: &Path, to: &Path) -> Res<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        if e.file_name() != "LOCK" && e.path().is_file() {
            std::fs::copy(e.path(), to.join(e.file_name()))?;
        }
    }
    Ok(())
}

/// Runs one writer until `stop`; returns its operation count.
fn writer(db: &Db, records: u64, stop: &AtomicBool, ops: &AtomicU64) -> strata::Result<()> {
    let mut rng = Rng(42);
    while !stop.load(Relaxed) {
        let i = rng.next() % records;
        db.put(&key(i), &doc(rng.next() % 100_000, i))?;
        ops.fetch_add(1, Relaxed);
    }
    Ok(())
}

fn table_bytes_written(db: &Db) -> u64 {
    let io = db.stats().io;
    io.flush_bytes_written + io.compaction_bytes_written
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let records: u64 = args
        .get(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(200_000);
    let tmp = tempfile::tempdir()?;
    let base = args
        .get(2)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| tmp.path().to_path_buf());
    // The build's pacing share (`Db::set_build_pacing`); default the
    // library's.
    let share: f64 = args
        .get(3)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(strata::DEFAULT_BUILD_SHARE);
    let main_dir = base.join("online");
    let _ = Db::destroy(&main_dir);
    let spec = IndexSpec::field("by_user", "user_id", KeyType::I64);

    // Load.
    let t = Instant::now();
    {
        let db = Db::open(&main_dir, Options::default())?;
        let mut rng = Rng(7);
        for i in 0..records {
            db.put(&key(i), &doc(rng.next() % 100_000, i))?;
        }
        for _ in 0..records / 5 {
            let i = rng.next() % records;
            db.put(&key(i), &doc(rng.next() % 100_000, i))?;
        }
        db.flush()?;
        db.wait_for_compactions()?;
        println!(
            "loaded {records} records (+{} updates) in {:.1} s: {} tables, {:.1} MiB",
            records / 5,
            t.elapsed().as_secs_f64(),
            db.current_version().all_files().count(),
            data_bytes(&db) as f64 / (1 << 20) as f64
        );
    }
    let (copy_online, copy_rewrite) = (base.join("copy-online"), base.join("copy-rewrite"));
    for d in [&copy_online, &copy_rewrite] {
        let _ = Db::destroy(d);
        copy_dir(&main_dir, d)?;
    }

    // 1 and 2: the writer alone, then during the online build.
    let db = Db::open(&main_dir, Options::default())?;
    db.set_build_pacing(share)?;
    let data = data_bytes(&db);
    let (stop, ops) = (AtomicBool::new(false), AtomicU64::new(0));
    let alone = std::thread::scope(|s| -> Res<f64> {
        let w = s.spawn(|| writer(&db, records, &stop, &ops));
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Relaxed);
        w.join().map_err(|_| "writer panicked")??;
        Ok(ops.load(Relaxed) as f64 / 3.0)
    })?;
    println!("writer alone: {alone:.0} puts/s");
    db.wait_for_compactions()?;
    let (stop, ops) = (AtomicBool::new(false), AtomicU64::new(0));
    let before = table_bytes_written(&db);
    let stalls_before = db.stats().io.write_stall_micros;
    // Side-file bytes the build wrote, polled from its progress (a side
    // file goes with its table when a compaction removes it).
    let side_written = AtomicU64::new(0);
    let (during, build_s) = std::thread::scope(|s| -> Res<(f64, f64)> {
        let w = s.spawn(|| writer(&db, records, &stop, &ops));
        let poll = s.spawn(|| {
            while !stop.load(Relaxed) {
                for i in db.indexes() {
                    if let Some(p) = i.stats.build {
                        side_written.fetch_max(p.bytes_written, Relaxed);
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        std::thread::sleep(Duration::from_millis(500));
        let start_ops = ops.load(Relaxed);
        let t = Instant::now();
        let built = db.create_index(spec.clone());
        let secs = t.elapsed().as_secs_f64();
        let n = ops.load(Relaxed) - start_ops;
        stop.store(true, Relaxed);
        w.join().map_err(|_| "writer panicked")??;
        poll.join().map_err(|_| "poller panicked")?;
        built?;
        Ok((n as f64 / secs, secs))
    })?;
    // At least what the last poll saw; the files left if more.
    let sides = side_written.load(Relaxed).max(side_bytes(&main_dir)?);
    println!(
        "online build (pacing share {share}) with the writer: {build_s:.2} s; writer {during:.0} puts/s ({:.0}% of alone); \
         side files written {:.2} MiB = {:.1}% of the data ({:.1} MiB); engine table bytes written meanwhile \
         (the writer's flushes and compactions) {:.1} MiB; writer stalled by level-0 back-pressure {:.2} s",
        100.0 * during / alone,
        sides as f64 / (1 << 20) as f64,
        100.0 * sides as f64 / data as f64,
        data as f64 / (1 << 20) as f64,
        (table_bytes_written(&db) - before) as f64 / (1 << 20) as f64,
        (db.stats().io.write_stall_micros - stalls_before) as f64 / 1e6
    );
    if !db.check_index("by_user")?.ok() {
        return Err("the index built online does not match a scan".into());
    }
    db.wait_for_compactions()?;
    let (stop, ops) = (AtomicBool::new(false), AtomicU64::new(0));
    let after = std::thread::scope(|s| -> Res<f64> {
        let w = s.spawn(|| writer(&db, records, &stop, &ops));
        std::thread::sleep(Duration::from_secs(3));
        stop.store(true, Relaxed);
        w.join().map_err(|_| "writer panicked")??;
        Ok(ops.load(Relaxed) as f64 / 3.0)
    })?;
    println!(
        "writer after the build (the index maintained): {after:.0} puts/s; during the build {:.0}% of that",
        100.0 * during / after
    );
    drop(db);

    // 3: both builds on the same data, no writer.
    for (dir, rewrite) in [(&copy_online, false), (&copy_rewrite, true)] {
        let db = Db::open(dir, Options::default())?;
        db.set_build_pacing(share)?;
        let before = table_bytes_written(&db);
        let t = Instant::now();
        if rewrite {
            db.create_index_rewriting(spec.clone())?;
        } else {
            db.create_index(spec.clone())?;
        }
        let secs = t.elapsed().as_secs_f64();
        let written = table_bytes_written(&db) - before + side_bytes(dir)?;
        println!(
            "{} build alone: {secs:.2} s, wrote {:.2} MiB ({:.1}% of the data)",
            if rewrite { "full-compaction" } else { "online" },
            written as f64 / (1 << 20) as f64,
            100.0 * written as f64 / data as f64
        );
        if !db.check_index("by_user")?.ok() {
            return Err("the index does not match a scan".into());
        }
    }
    Ok(())
}
