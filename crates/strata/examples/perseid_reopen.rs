//! Measures what a reopen of a database with a `perseid` index costs: the
//! close (drop) and the open, and whether the open rebuilt the index.
//! Records as PERSEID §5.1 (random 64-bit primary and secondary keys,
//! about 25 records per secondary key), upsert-uniform (half the writes
//! update a random live key).
//!
//! `cargo run --release -p strata --example perseid_reopen -- DIR N VALUE_BYTES`
//! (then again with `open-only` as a fourth argument to time only an open,
//! for example under `valgrind --tool=callgrind`). `STRATEGY=memory` uses
//! another strategy, `TIERED=1` the tiered primary, `PAGE_CACHE_MB=n` the
//! index's page cache budget (MiB), `MEMTABLE_MB=n` a
//! smaller memtable (more components); after the reopen, 200 (`LOOKUPS`)
//! top-10 lookups (records fetched; `KEYS_ONLY=1`: index-only; over
//! `LOOKUP_KEYS` secondary keys, default all) report their mean latency
//! and percentiles, the candidates validated, block and Bloom counts,
//! and those of the same records fetched by a plain batched lookup.
//! `RANGE_QUERIES=q` then runs `q` full (no limit) range queries over
//! about `RANGE_SKEYS` (default 20) consecutive secondary keys each (~25
//! records a key, fetched), with `THREADS=t` fetch workers (default 1),
//! twice (cold, then warm block cache), and reports their counts. `WARM=1`
//! reads every file of the database before the lookups, as the harness
//! does before each query set; `WARM_EVERY=k` again after every `k`
//! lookups (untimed). `PAUSE_MS=t` waits t ms after the open before the
//! lookups.

use std::time::Instant;

use strata::{CompactionStyle, Db, IndexSpec, IndexValue, KeyType, Options, QueryOptions};

/// Secondary keys in the pool: about 25 live records each.
fn skey_count(n: u64) -> u64 {
    (n / 2 / 25).max(1)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let dir = std::path::PathBuf::from(args.get(1).ok_or("DIR")?);
    let n: u64 = args.get(2).map_or(Ok(200_000), |s| s.parse())?;
    let value_bytes: usize = args.get(3).map_or(Ok(100), |s| s.parse())?;
    let open_only = args.get(4).is_some_and(|a| a == "open-only");
    let strategy = std::env::var("STRATEGY").unwrap_or_else(|_| "perseid".into());
    let mut opts = Options::paper();
    if let Some(mb) = std::env::var("MEMTABLE_MB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        opts = opts.memtable_size(mb << 20);
    }
    if std::env::var("TIERED").is_ok_and(|v| v == "1") {
        opts = opts.compaction_style(CompactionStyle::Tiered);
    }
    if !open_only {
        let _ = std::fs::remove_dir_all(&dir);
        let db = Db::open(&dir, opts.clone())?;
        let mut spec = IndexSpec::field("by_s", "s", KeyType::I64).strategy(&strategy);
        if let Ok(mb) = std::env::var("PAGE_CACHE_MB") {
            spec = spec.param("page_cache_mb", &mb);
        }
        db.create_index(spec)?;
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut keys: Vec<u64> = Vec::new();
        let pad = "x".repeat(value_bytes);
        let skeys = skey_count(n);
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
        eprintln!(
            "settled: index RAM {} B, page cache {:?}",
            db.indexes()[0].stats.memory_bytes,
            db.indexes()[0].stats.page_cache
        );
        let t = Instant::now();
        drop(db);
        eprintln!("close: {:?}", t.elapsed());
    }
    let t = Instant::now();
    let db = Db::open(&dir, opts)?;
    let open = t.elapsed();
    let s = db.indexes()[0].stats.clone();
    eprintln!(
        "open: {open:?}; index RAM {} B, file {} B, entries {}, page cache {:?}",
        s.memory_bytes, s.disk_bytes, s.global_entries, s.page_cache
    );
    // `PAUSE_MS=t`: the lookups start t ms after the open (the page
    // checker's work after an open done, as in the harness, which
    // measures sizes and warms the page cache first).
    if let Some(ms) = std::env::var("PAUSE_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
    let (mut hits, mut comps, mut blocks) = (0u64, 0u64, 0u64);
    let (mut candidates, mut stale) = (0u64, 0u64);
    let (probes0, data0) = {
        let io = db.engine().stats().io;
        (io.bloom_probes, io.data_blocks.disk + io.data_blocks.cache)
    };
    let mut found = Vec::new();
    // `KEYS_ONLY=1`: index-only lookups (no record fetched).
    let keys_only = std::env::var("KEYS_ONLY").is_ok_and(|v| v == "1");
    // `LOOKUPS=q`: that many lookups (default 200), timed together.
    let lookups: u64 = std::env::var("LOOKUPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    // `LOOKUP_KEYS=k`: the lookups cycle over `k` secondary keys (default
    // all of them; a few keys measure the lookup with its lines in cache).
    let cycle = std::env::var("LOOKUP_KEYS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(u64::MAX)
        .clamp(1, skey_count(n));
    // Each lookup's latency, for the percentiles and the mean (as the
    // harness times each query).
    let mut each: Vec<f64> = Vec::with_capacity(lookups as usize);
    // `WARM=1`: every file of the database read once first, 1 MiB at a
    // time, as the harness does before each query set (the page cache
    // warm, the CPU caches cold).
    // `WARM_EVERY=k`: again after every `k` lookups (not timed), for
    // profiles of many lookups in that state.
    let warm_first = std::env::var("WARM").is_ok_and(|v| v == "1");
    let warm_every: u64 = std::env::var("WARM_EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut took = std::time::Duration::ZERO;
    for i in 0..lookups {
        if (warm_first && i == 0) || (warm_every > 0 && i > 0 && i % warm_every == 0) {
            warm(&dir)?;
        }
        let t1 = Instant::now();
        let sk = ((i % cycle * 7919) % skey_count(n)).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 1;
        let pred = strata::Predicate::Eq(IndexValue::I64(sk as i64));
        let (h, p) = db.query_profiled(
            "by_s",
            &pred,
            QueryOptions::default().limit(10).keys_only(keys_only),
        )?;
        let d = t1.elapsed();
        took += d;
        each.push(d.as_secs_f64() * 1e6);
        hits += h.len() as u64;
        comps += p.components_scanned;
        blocks += p.data_blocks_read;
        candidates += p.candidates;
        stale += p.stale;
        // The records' keys are kept only for the batched comparison
        // below; an index-only answer is just dropped, as by the harness.
        if !keys_only {
            found.extend(h.into_iter().map(|h| h.key));
        }
    }
    each.sort_by(f64::total_cmp);
    let pct = |q: f64| {
        each.get(((each.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(0.0)
    };
    eprintln!(
        "lookup latency µs: p50 {:.2}, p90 {:.2}, p99 {:.2}, max {:.2}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        pct(1.0)
    );
    let io = db.engine().stats().io;
    eprintln!(
        "{lookups} top-10 lookups: {hits} records ({candidates} candidates validated, {stale} stale), {comps} components probed, {blocks} data blocks, {} Bloom probes, {:.2} µs a lookup",
        io.bloom_probes - probes0,
        took.as_secs_f64() * 1e6 / lookups.max(1) as f64
    );
    let (probes1, data1) = (io.bloom_probes, io.data_blocks.disk + io.data_blocks.cache);
    if !keys_only {
        let keys: Vec<&[u8]> = found.iter().map(|k| k.as_slice()).collect();
        for k in keys.chunks(10) {
            db.engine().multi_get_with_seq(k)?;
        }
        let io = db.engine().stats().io;
        eprintln!(
            "the same records by batched lookups (10 a batch): {} data blocks, {} Bloom probes (queries' data blocks {})",
            io.data_blocks.disk + io.data_blocks.cache - data1,
            io.bloom_probes - probes1,
            data1 - data0
        );
    }
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let range_queries = env("RANGE_QUERIES", 0);
    if range_queries > 0 {
        let r = RangeRun {
            n,
            queries: range_queries,
            skeys: env("RANGE_SKEYS", 20),
            threads: env("THREADS", 1) as usize,
        };
        // The first pass reads the records' blocks from disk into the
        // block cache; the second finds them there.
        range_pass_cold(&db, &r)?;
        range_pass_warm(&db, &r)?;
    }
    eprintln!(
        "after the lookups: index RAM {} B, page cache {:?}",
        db.indexes()[0].stats.memory_bytes,
        db.indexes()[0].stats.page_cache
    );
    let t = Instant::now();
    drop(db);
    eprintln!("close: {:?}", t.elapsed());
    Ok(())
}

/// `queries` full (no limit) range queries over about `skeys` consecutive
/// secondary keys each, records fetched by `threads` workers.
struct RangeRun {
    n: u64,
    queries: u64,
    skeys: u64,
    threads: usize,
}

/// The range queries on a cold block cache (a separate symbol, for
/// `valgrind --toggle-collect`).
#[inline(never)]
fn range_pass_cold(db: &Db, r: &RangeRun) -> Result<(), Box<dyn std::error::Error>> {
    range_queries(db, r, "cold")
}

/// The same queries again, their blocks in the block cache.
#[inline(never)]
fn range_pass_warm(db: &Db, r: &RangeRun) -> Result<(), Box<dyn std::error::Error>> {
    range_queries(db, r, "warm")
}

fn range_queries(db: &Db, r: &RangeRun, label: &str) -> Result<(), Box<dyn std::error::Error>> {
    // Secondary keys are spread uniformly over [0, 2^63): a width of `skeys`
    // key spacings covers about `skeys` keys.
    let width = (u64::MAX >> 1) / skey_count(r.n) * r.skeys;
    let (mut hits, mut comps, mut blocks) = (0u64, 0u64, 0u64);
    let probes0 = db.engine().stats().io.bloom_probes;
    let t = Instant::now();
    for i in 0..r.queries {
        let lo = ((i * 7919) % skey_count(r.n)).wrapping_mul(0x2545_F491_4F6C_DD1D) >> 1;
        let hi = lo.saturating_add(width).min(u64::MAX >> 1);
        let pred = strata::Predicate::Range(IndexValue::I64(lo as i64), IndexValue::I64(hi as i64));
        let (h, p) = db.query_profiled(
            "by_s",
            &pred,
            QueryOptions::default().parallelism(r.threads),
        )?;
        hits += h.len() as u64;
        comps += p.components_scanned;
        blocks += p.data_blocks_read;
    }
    let el = t.elapsed();
    eprintln!(
        "{} full range queries over ~{} keys ({label}, {} threads): {hits} records, {comps} components probed, {blocks} data blocks, {} Bloom probes, {:?} ({:?} per query)",
        r.queries,
        r.skeys,
        r.threads,
        db.engine().stats().io.bloom_probes - probes0,
        el,
        el / r.queries as u32
    );
    Ok(())
}

/// Reads every file under `dir` once, contents discarded.
fn warm(dir: &std::path::Path) -> std::io::Result<()> {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 20];
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            warm(&e.path())?;
        } else {
            let mut f = std::fs::File::open(e.path())?;
            while f.read(&mut buf)? > 0 {}
        }
    }
    Ok(())
}
