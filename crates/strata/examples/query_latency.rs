//! Latency of one calibrated query set through the Rust API, the baseline
//! of the Python binding's overhead measurement
//! (`python/bench/query_latency.py` runs the same queries the same way).
//!
//! ```sh
//! cargo run --release -p strata --example query_latency -- DB INDEX QUERIES.json [ROUNDS] [values|keys_only|parse]
//! ```
//!
//! DB is an existing database (opened with `Options::paper()`) with index
//! INDEX (`LIMIT=k` in the environment: top-k queries, newest first;
//! `CACHE_KB=n`: an n KiB block cache, so that blocks come from the file;
//! `PRE=INDEX:FILE.json`: that query set runs once first; `COLD=1`: no
//! warm-up pass; `MMAP=1`: tables read through memory mappings;
//! `DOORKEEPER=0`: the block cache admits every missed block; `THREADS=n`:
//! records read with n threads; `PERQ=FILE`: each query's fastest timed
//! run written to FILE, one line per query; `EVICT=n`: n MiB of other
//! memory written before each timed query, so that it starts with cold
//! CPU caches);
//! QUERIES.json is a query set written by `strata gen --queries`
//! (`{"range": [lo, hi]}` or `{"window": [x1, y1, x2, y2]}` each). Every
//! query runs once to warm the cache, then ROUNDS (default 5) times; each
//! run is timed alone. Prints the median and mean latency per query in
//! microseconds, the mean result count, and how many of the timed rounds'
//! blocks the block cache served.

use std::time::Instant;

use strata::{Db, IndexValue, Options, Predicate, QueryOptions};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn predicate(q: &serde_json::Value) -> Res<Predicate> {
    let nums = |v: &serde_json::Value| -> Res<Vec<f64>> {
        v.as_array()
            .ok_or("not an array")?
            .iter()
            .map(|x| x.as_f64().ok_or_else(|| "not a number".into()))
            .collect()
    };
    if let Some(r) = q.get("range") {
        let a = r.as_array().ok_or("range: not an array")?;
        let lo = a.first().and_then(|x| x.as_i64()).ok_or("range lo")?;
        let hi = a.get(1).and_then(|x| x.as_i64()).ok_or("range hi")?;
        return Ok(Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi)));
    }
    if let Some(w) = q.get("window") {
        let c = nums(w)?;
        if let [x1, y1, x2, y2] = c.as_slice() {
            return Ok(Predicate::Within([*x1, *y1, *x2, *y2]));
        }
    }
    if let Some(v) = q.get("lookup").and_then(|v| v.as_i64()) {
        return Ok(Predicate::Eq(IndexValue::I64(v)));
    }
    Err(format!("unsupported query {q}").into())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, db, index, queries, rest @ ..] = args.as_slice() else {
        return Err(
            "usage: query_latency DB INDEX QUERIES.json [ROUNDS] [values|keys_only|parse]".into(),
        );
    };
    let rounds: usize = rest.first().map(|r| r.parse()).transpose()?.unwrap_or(5);
    let mode = rest.get(1).map_or("values", String::as_str);
    if !["values", "keys_only", "parse"].contains(&mode) {
        return Err(format!("unknown mode {mode:?}").into());
    }
    let keys_only = mode == "keys_only";
    // `parse`: also parse every value into a serde_json::Value, the Rust
    // counterpart of the Python API's dicts.
    let parse = mode == "parse";
    let set: serde_json::Value = serde_json::from_slice(&std::fs::read(queries)?)?;
    let preds = set
        .get("queries")
        .and_then(|q| q.as_array())
        .ok_or("no queries")?
        .iter()
        .map(predicate)
        .collect::<Res<Vec<_>>>()?;
    let mut options = Options::paper().create_if_missing(false);
    // `CACHE_KB=n`: a block cache of n KiB instead of the preset's 64 MiB
    // (0 disables it), so that the timed rounds read blocks from the file.
    if let Some(kb) = std::env::var("CACHE_KB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        options = options.block_cache_bytes(kb << 10);
    }
    if std::env::var("MMAP").is_ok_and(|v| v == "1") {
        options = options.mmap_reads(true);
    }
    // `DOORKEEPER=0`: every missed block enters the block cache.
    if std::env::var("DOORKEEPER").is_ok_and(|v| v == "0") {
        options = options.block_cache_doorkeeper(false);
    }
    let db = Db::open(db, options)?;
    let mut opts = QueryOptions::default().keys_only(keys_only);
    // `LIMIT=k`: top-k queries (newest first).
    if let Some(k) = std::env::var("LIMIT")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        opts = opts.limit(k);
    }
    // `THREADS=n`: read records with n threads (`QueryOptions::parallelism`).
    if let Some(n) = std::env::var("THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        opts = opts.parallelism(n);
    }
    // `PRE=INDEX:QUERIES.json`: run that set once first (as `bench run`
    // runs the classes one after another), then this set once untimed.
    if let Ok(pre) = std::env::var("PRE") {
        let (pre_index, pre_file) = pre.split_once(':').ok_or("PRE=INDEX:QUERIES.json")?;
        let set: serde_json::Value = serde_json::from_slice(&std::fs::read(pre_file)?)?;
        for q in set
            .get("queries")
            .and_then(|q| q.as_array())
            .ok_or("PRE: no queries")?
        {
            std::hint::black_box(db.query(pre_index, &predicate(q)?, opts)?);
        }
    }
    let mut results = 0usize;
    let cold = std::env::var("COLD").is_ok();
    if !cold {
        for p in &preds {
            results += db.query(index, p, opts)?.len();
        }
    }
    // `EVICT=n`: before each timed query, n MiB of other memory are
    // written (untimed), so that the query finds its structures out of
    // the CPU caches, as `bench run`'s single pass over a set does.
    let mut evict = vec![
        0u8;
        std::env::var("EVICT")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(0)
            << 20
    ];
    let before = db.stats().io;
    let mut times = Vec::with_capacity(preds.len() * rounds);
    for _ in 0..rounds {
        for p in &preds {
            for line in evict.chunks_mut(64) {
                if let Some(b) = line.first_mut() {
                    *b = b.wrapping_add(1);
                }
            }
            std::hint::black_box(&evict);
            let t = Instant::now();
            let hits = db.query(index, p, opts)?;
            if cold {
                results += hits.len();
            }
            if parse {
                let docs = hits
                    .iter()
                    .filter_map(|h| h.value)
                    .map(serde_json::from_slice::<serde_json::Value>)
                    .collect::<Result<Vec<_>, _>>()?;
                std::hint::black_box(docs);
            }
            times.push(t.elapsed().as_secs_f64() * 1e6);
            std::hint::black_box(hits);
        }
    }
    // `PERQ=FILE`: each query's fastest timed run (µs), one line per
    // query in set order, to compare systems query by query.
    if let Ok(path) = std::env::var("PERQ") {
        let n = preds.len().max(1);
        let lines: String = (0..preds.len())
            .map(|q| {
                let best = times
                    .iter()
                    .skip(q)
                    .step_by(n)
                    .copied()
                    .fold(f64::INFINITY, f64::min);
                format!("{best:.1}\n")
            })
            .collect();
        std::fs::write(path, lines)?;
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    println!(
        "rust index={index} queries={} rounds={rounds} mode={mode} mean_results={:.1} median_us={median:.1} mean_us={mean:.1}",
        preds.len(),
        results as f64 / preds.len().max(1) as f64
    );
    // Where the timed rounds' blocks came from (block cache or file).
    let io = db.stats().io;
    println!(
        "timed rounds: data blocks {} from the cache, {} from the file; index blocks {} / {}; meta blocks {} / {}",
        io.data_blocks.cache - before.data_blocks.cache,
        io.data_blocks.disk - before.data_blocks.disk,
        io.index_blocks.cache - before.index_blocks.cache,
        io.index_blocks.disk - before.index_blocks.disk,
        io.meta_blocks.cache - before.meta_blocks.cache,
        io.meta_blocks.disk - before.meta_blocks.disk,
    );
    Ok(())
}
