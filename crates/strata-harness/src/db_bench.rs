//! `strata bench`: a db_bench-style fill / read / multi_get benchmark.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use strata::lsm::filename::{self, FileKind};
use strata::{Db, Options, Stats, WriteBatch, WriteOptions};

use crate::Error;
use strata_bench::rng::SplitMix64;

use crate::progress::Progress;

/// Parameters of one benchmark run.
pub struct BenchArgs {
    /// Keys written by the fill phase (`0..records`, in random order, or
    /// in key order with `sequential`).
    pub records: u64,
    /// Fill in key order (db_bench's `fillseq`) instead of a random
    /// permutation (`fillrandom`).
    pub sequential: bool,
    /// Random gets of existing keys in the read phase.
    pub reads: u64,
    /// `multi_get` calls of the multiget phase, each of 16 random
    /// existing keys.
    pub multigets: u64,
    /// Puts per write batch in the fill phase; at least 1.
    pub batch: usize,
    /// Bytes of each (random) value.
    pub value_size: usize,
    /// Bytes of each key (zero-padded decimal); must hold the digits of
    /// `records - 1`.
    pub key_size: usize,
    /// Open with `Options::paper()` rather than `Options::default()`.
    pub paper: bool,
    /// Database directory, which must not hold a database yet (default: a
    /// temporary directory, removed afterwards).
    pub db: Option<PathBuf>,
    /// Report as a pretty JSON document rather than text.
    pub json: bool,
}

/// Keys fetched by one `multi_get`.
const MULTIGET_KEYS: usize = 16;

/// Removes a directory this process created, even on early return.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Creates a fresh directory under the system's temporary directory.
pub(crate) fn make_temp_dir() -> Result<TempDir, Error> {
    let base = std::env::temp_dir();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    for attempt in 0..100u32 {
        let p = base.join(format!(
            "strata-bench-{}-{nanos}-{attempt}",
            std::process::id()
        ));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(TempDir(p)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::Other(format!("create {}: {e}", p.display()))),
        }
    }
    Err(Error::Other(format!(
        "could not create a temporary directory in {}",
        base.display()
    )))
}

fn key(n: u64, width: usize) -> Vec<u8> {
    format!("{n:0width$}").into_bytes()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64().max(1e-9)
}

/// Bytes of the WAL files in `dir`.
fn wal_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .filter(|e| {
            matches!(
                e.file_name().to_str().and_then(filename::parse),
                Some(FileKind::Log(_))
            )
        })
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum()
}

struct Phase {
    name: &'static str,
    ops: u64,
    bytes: u64,
    time: Duration,
}

impl Phase {
    fn json(&self) -> serde_json::Value {
        json!({
            "phase": self.name,
            "ops": self.ops,
            "seconds": self.time.as_secs_f64(),
            "ops_per_sec": self.ops as f64 / secs(self.time),
            "mb_per_sec": self.bytes as f64 / 1e6 / secs(self.time),
        })
    }
}

/// Fills a fresh database, then runs the read and multiget phases, and
/// returns the report (text, or JSON when `args.json`; newline-terminated).
/// Errors: `batch` is 0, `key_size` is too small for `records`, a
/// database already exists at `db`, or an engine error.
pub fn run(args: &BenchArgs) -> Result<String, Error> {
    if args.batch == 0 {
        return Err(Error::Other("--batch must be at least 1".into()));
    }
    if args.records > 0 && (args.records - 1).to_string().len() > args.key_size {
        return Err(Error::Other(format!(
            "--key-size {} is too small for {} records",
            args.key_size, args.records
        )));
    }
    let _temp;
    let dir = match &args.db {
        Some(d) => d.clone(),
        None => {
            let t = make_temp_dir()?;
            let d = t.0.clone();
            _temp = t;
            d
        }
    };
    let opts = if args.paper {
        Options::paper()
    } else {
        Options::default()
    };
    // The benchmark measures a fresh database: refuse to fill an existing one.
    let db = Db::open(&dir, opts.error_if_exists(true))?;
    let result = bench(&db, &dir, args);
    drop(db);
    result
}

fn bench(db: &Db, dir: &Path, args: &BenchArgs) -> Result<String, Error> {
    let n = args.records;
    let entry_bytes = (args.key_size + args.value_size) as u64;
    let mut rng = SplitMix64::new(0x5EED_BE4C);
    let wopts = WriteOptions::default();

    // Fill in key order, or in random order: a Fisher-Yates permutation
    // of 0..n.
    let mut order: Vec<u64> = (0..n).collect();
    if !args.sequential {
        for i in (1..order.len()).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
    }
    let mut value = vec![0u8; args.value_size];
    let mut progress = Progress::new("fill", n);
    let start = Instant::now();
    for (c, chunk) in order.chunks(args.batch).enumerate() {
        let mut b = WriteBatch::new();
        for &k in chunk {
            for w in value.chunks_mut(8) {
                let r = rng.next_u64().to_le_bytes();
                w.copy_from_slice(&r[..w.len()]);
            }
            b.put(&key(k, args.key_size), &value);
        }
        db.write(b, wopts)?;
        progress.tick((c * args.batch) as u64);
    }
    let fill = Phase {
        name: "fill",
        ops: n,
        bytes: n * entry_bytes,
        time: start.elapsed(),
    };
    progress.finish();
    drop(order);

    let t = Instant::now();
    db.flush()?;
    let flush_time = t.elapsed();
    let t = Instant::now();
    db.wait_for_compactions()?;
    let compaction_wait = t.elapsed();

    // Random reads of existing keys.
    let before = db.stats().io;
    let mut progress = Progress::new("read", args.reads);
    let mut found = 0u64;
    let mut read_bytes = 0u64;
    let start = Instant::now();
    for i in 0..args.reads {
        let k = key(rng.below(n), args.key_size);
        if let Some(v) = db.get(&k)? {
            found += 1;
            read_bytes += (k.len() + v.len()) as u64;
        }
        if i % 1024 == 0 {
            progress.tick(i);
        }
    }
    let read = Phase {
        name: "read",
        ops: args.reads,
        bytes: read_bytes,
        time: start.elapsed(),
    };
    progress.finish();
    let read_io = db.stats().io.delta(&before);

    // multi_get of 16 random keys.
    let before = db.stats().io;
    let mut progress = Progress::new("multiget", args.multigets);
    let mut mg_found = 0u64;
    let mut mg_bytes = 0u64;
    let start = Instant::now();
    for i in 0..args.multigets {
        let keys: Vec<Vec<u8>> = (0..MULTIGET_KEYS)
            .map(|_| key(rng.below(n), args.key_size))
            .collect();
        let refs: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
        for (k, v) in keys.iter().zip(db.multi_get(&refs)?) {
            if let Some(v) = v {
                mg_found += 1;
                mg_bytes += (k.len() + v.len()) as u64;
            }
        }
        if i % 256 == 0 {
            progress.tick(i);
        }
    }
    let multiget = Phase {
        name: "multiget",
        ops: args.multigets,
        bytes: mg_bytes,
        time: start.elapsed(),
    };
    progress.finish();
    let mg_io = db.stats().io.delta(&before);

    let stats = db.stats();
    let user_bytes = n * entry_bytes;
    let wal = wal_bytes(dir);
    let space_amp = if user_bytes == 0 {
        0.0
    } else {
        (stats.table_bytes + wal) as f64 / user_bytes as f64
    };
    let per = |x: u64, ops: u64| if ops == 0 { 0.0 } else { x as f64 / ops as f64 };
    let data_per_get = per(read_io.data_blocks.total(), args.reads);
    let data_per_mg_key = per(
        mg_io.data_blocks.total(),
        args.multigets * MULTIGET_KEYS as u64,
    );

    if args.json {
        let out = json!({
            "options": if args.paper { "paper" } else { "default" },
            "records": n,
            "key_size": args.key_size,
            "value_size": args.value_size,
            "batch": args.batch,
            "fill_order": if args.sequential { "sequential" } else { "random" },
            "phases": [fill.json(), read.json(), multiget.json()],
            "flush_seconds": flush_time.as_secs_f64(),
            "compaction_wait_seconds": compaction_wait.as_secs_f64(),
            "reads_found": found,
            "multiget_keys_found": mg_found,
            "write_amplification": stats.write_amplification,
            "space_amplification": space_amp,
            "table_bytes": stats.table_bytes,
            "wal_bytes": wal,
            "user_bytes": user_bytes,
            "data_blocks_per_get": data_per_get,
            "data_blocks_per_multiget_key": data_per_mg_key,
            "read_io": read_io,
            "multiget_io": mg_io,
            "levels": stats.levels,
            "stats": stats,
        });
        let s = serde_json::to_string_pretty(&out)
            .map_err(|e| Error::Other(format!("serialize: {e}")))?;
        return Ok(format!("{s}\n"));
    }

    let mut s = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        s,
        "options: {}   records: {n}   key: {} B   value: {} B   batch: {}   fill: {}",
        if args.paper { "paper" } else { "default" },
        args.key_size,
        args.value_size,
        args.batch,
        if args.sequential {
            "in key order"
        } else {
            "random order"
        }
    );
    for p in [&fill, &read, &multiget] {
        let _ = writeln!(
            s,
            "{:<9} {:>10} ops {:>9.3} s {:>12.0} ops/s {:>9.2} MB/s",
            p.name,
            p.ops,
            p.time.as_secs_f64(),
            p.ops as f64 / secs(p.time),
            p.bytes as f64 / 1e6 / secs(p.time)
        );
    }
    let _ = writeln!(
        s,
        "flush: {:.3} s   wait for compactions: {:.3} s",
        flush_time.as_secs_f64(),
        compaction_wait.as_secs_f64()
    );
    let _ = writeln!(
        s,
        "reads found: {found}/{}   multiget keys found: {mg_found}/{}",
        args.reads,
        args.multigets * MULTIGET_KEYS as u64
    );
    let _ = writeln!(s, "write amplification: {:.2}", stats.write_amplification);
    let _ = writeln!(
        s,
        "space amplification: {space_amp:.2} (tables {} B + WAL {wal} B / user {user_bytes} B)",
        stats.table_bytes
    );
    let _ = writeln!(
        s,
        "data blocks per get: {data_per_get:.3} (disk {}, cache {})",
        read_io.data_blocks.disk, read_io.data_blocks.cache
    );
    let _ = writeln!(
        s,
        "data blocks per multiget key: {data_per_mg_key:.3} (disk {}, cache {})",
        mg_io.data_blocks.disk, mg_io.data_blocks.cache
    );
    let _ = writeln!(
        s,
        "bloom (read phase): probes {}, negatives {}",
        read_io.bloom_probes, read_io.bloom_negatives
    );
    let _ = writeln!(
        s,
        "bloom (total): probes {}, negatives {}",
        stats.io.bloom_probes, stats.io.bloom_negatives
    );
    s.push_str(&level_table(&stats));
    Ok(s)
}

/// Files and bytes per non-empty level (and L0 always).
pub fn level_table(stats: &Stats) -> String {
    let mut s = String::from("level      files           bytes\n");
    for l in &stats.levels {
        if l.level == 0 || l.files > 0 {
            s.push_str(&format!("L{:<8} {:>6} {:>15}\n", l.level, l.files, l.bytes));
        }
    }
    let files: usize = stats.levels.iter().map(|l| l.files).sum();
    s.push_str(&format!(
        "{:<9} {:>6} {:>15}\n",
        "total", files, stats.table_bytes
    ));
    s
}
