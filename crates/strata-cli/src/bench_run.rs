//! `strata bench run`: the papers' static experiments, side by side.
//!
//! Every system in `--systems` loads the same generated records (written
//! once, in memory) into a fresh database with the paper preset, then runs
//! the same calibrated query sets. Results go to `DIR/results.json` (schema
//! in the README) and a compact table on stdout. Block counts come from the
//! engine's query profiles, so they do not depend on machine noise.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use strata::{Db, IndexSpec, IndexValue, KeyType, Options, Predicate, QueryOptions, WriteOptions};
use strata_bench::queries::{Query, QuerySet};

use crate::report::{print_table, write_report};
use crate::results::{QueryResult, RunResults, SystemResult};
use crate::CliError;

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Workload: static-tweets (user_id i64, coordinates point) or
    /// static-buildings (bbox rect, perimeter f64).
    #[arg(long, default_value = "static-tweets")]
    pub workload: String,
    /// Records to generate and load.
    #[arg(long, default_value_t = 200_000)]
    pub records: u64,
    /// Queries per query set.
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Comma-separated systems: strata:none, strata:next,
    /// strata:next[delta=off] (parameters in brackets, `;`-separated).
    #[arg(long, default_value = "strata:none,strata:next")]
    pub systems: String,
    /// Top-K variants to run besides the full queries (comma-separated).
    #[arg(long, default_value = "")]
    pub top_k: String,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Read tables with O_DIRECT (cold reads).
    #[arg(long)]
    pub direct_io: bool,
    /// Output directory (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Where the databases are built (default: a temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

#[derive(Debug, Clone)]
struct System {
    name: String,
    strategy: Option<String>,
    params: Vec<(String, String)>,
}

fn parse_systems(s: &str) -> Result<Vec<System>, CliError> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let rest = item.strip_prefix("strata:").ok_or_else(|| {
            CliError::Other(format!(
                "unknown system {item:?} (peers live in strata-compare)"
            ))
        })?;
        let (strategy, params) = match rest.split_once('[') {
            Some((s, p)) => {
                let p = p
                    .strip_suffix(']')
                    .ok_or_else(|| CliError::Other(format!("system {item:?}: missing ]")))?;
                let params = p
                    .split(';')
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| {
                        kv.split_once('=')
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .ok_or_else(|| {
                                CliError::Other(format!("system {item:?}: {kv:?} is not key=value"))
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                (s, params)
            }
            None => (rest, Vec::new()),
        };
        out.push(System {
            name: item.to_string(),
            strategy: (strategy != "none").then(|| strategy.to_string()),
            params,
        });
    }
    if out.is_empty() {
        return Err(CliError::Other("--systems is empty".into()));
    }
    Ok(out)
}

fn progress(msg: &str) {
    if std::io::stderr().is_terminal() {
        eprintln!("{msg}");
    }
}

fn to_predicate(q: &Query) -> Predicate {
    match *q {
        Query::Lookup(v) => Predicate::Eq(IndexValue::I64(v)),
        Query::Range(lo, hi) => Predicate::Range(IndexValue::I64(lo), IndexValue::I64(hi)),
        Query::RangeF(lo, hi) => Predicate::Range(IndexValue::F64(lo), IndexValue::F64(hi)),
        Query::Window(w) => Predicate::Within(w),
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn options(direct_io: bool) -> Options {
    Options::paper().direct_io(direct_io)
}

/// The generated records and the query sets calibrated on them.
struct Workload {
    records: Vec<(Vec<u8>, Vec<u8>)>,
    indexes: Vec<(&'static str, &'static str, KeyType)>,
    sets: Vec<QuerySet>,
}

fn static_tweets(n: u64, queries: usize, seed: u64) -> Workload {
    let mut records = Vec::with_capacity(n as usize);
    let mut users = Vec::with_capacity(n as usize);
    let mut coords = Vec::with_capacity(n as usize);
    for t in strata_bench::gen::tweets(seed, n) {
        users.push(t.user_id);
        coords.push(t.coordinates);
        records.push((t.id.to_string().into_bytes(), t.to_json().into_bytes()));
    }
    let sets =
        strata_bench::queries::tweet_query_sets_from(&users, &coords, queries, seed ^ 0x5eed);
    Workload {
        records,
        indexes: vec![
            ("user_id", "user_id", KeyType::I64),
            ("coordinates", "coordinates", KeyType::Point),
        ],
        sets,
    }
}

fn static_buildings(n: u64, queries: usize, seed: u64) -> Workload {
    let mut records = Vec::with_capacity(n as usize);
    let mut bboxes = Vec::with_capacity(n as usize);
    let mut perimeters = Vec::with_capacity(n as usize);
    for b in strata_bench::gen::buildings(seed, n) {
        bboxes.push(b.bbox);
        perimeters.push(b.perimeter);
        records.push((b.id.to_string().into_bytes(), b.to_json().into_bytes()));
    }
    let sets = strata_bench::queries::building_query_sets_from(
        &bboxes,
        &perimeters,
        queries,
        seed ^ 0x5eed,
    );
    Workload {
        records,
        indexes: vec![
            ("bbox", "bbox", KeyType::Rect),
            ("perimeter", "perimeter", KeyType::F64),
        ],
        sets,
    }
}

fn run_system(
    sys: &System,
    w: &Workload,
    args: &RunArgs,
    dir: &Path,
    top_ks: &[usize],
) -> Result<SystemResult, CliError> {
    let _ = std::fs::remove_dir_all(dir);
    let db = Db::open(dir, options(args.direct_io))?;
    if let Some(strategy) = &sys.strategy {
        for (name, field, ty) in &w.indexes {
            let mut spec = IndexSpec::field(name, field, *ty).strategy(strategy);
            for (k, v) in &sys.params {
                spec = spec.param(k, v);
            }
            db.create_index(spec)?;
        }
    }
    progress(&format!(
        "{}: loading {} records",
        sys.name,
        w.records.len()
    ));
    let t = Instant::now();
    for (k, v) in &w.records {
        db.put_opt(k, v, WriteOptions::default())?;
    }
    let ingest = t.elapsed();
    let t = Instant::now();
    db.flush()?;
    db.wait_for_compactions()?;
    let settle = t.elapsed();
    let stats = db.stats();
    let infos = db.indexes();
    drop(db);

    let t = Instant::now();
    let db = Db::open(dir, options(args.direct_io))?;
    let reopen = t.elapsed();

    let mut queries = Vec::new();
    if sys.strategy.is_some() {
        for set in &w.sets {
            for k in std::iter::once(None).chain(top_ks.iter().map(|k| Some(*k))) {
                progress(&format!(
                    "{}: {} {} top_k={k:?}",
                    sys.name, set.attribute, set.class
                ));
                queries.push(run_set(&db, set, k)?);
            }
        }
    }
    let result = SystemResult {
        system: sys.name.clone(),
        ingest_seconds: ingest.as_secs_f64(),
        settle_seconds: settle.as_secs_f64(),
        reopen_seconds: reopen.as_secs_f64(),
        db_bytes: stats.table_bytes,
        index_bytes: infos.iter().map(|i| i.stats.disk_bytes).sum(),
        index_memory_bytes: infos.iter().map(|i| i.stats.memory_bytes).sum(),
        write_amplification: stats.write_amplification,
        queries,
        mixed: Vec::new(),
        ops: Vec::new(),
    };
    drop(db);
    let _ = std::fs::remove_dir_all(dir);
    Ok(result)
}

fn run_set(db: &Db, set: &QuerySet, top_k: Option<usize>) -> Result<QueryResult, CliError> {
    let opts = QueryOptions {
        limit: top_k,
        keys_only: false,
    };
    let mut lat = Vec::with_capacity(set.queries.len());
    let (mut results, mut blocks, mut min_blocks, mut index_blocks, mut stale) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut mismatches = 0u64;
    for (i, q) in set.queries.iter().enumerate() {
        let pred = to_predicate(q);
        let t = Instant::now();
        let (hits, p) = db.query_profiled(&set.attribute, &pred, opts)?;
        lat.push(t.elapsed());
        results += hits.len() as u64;
        let want = set.expected_counts.get(i).copied();
        let want = top_k.map_or(want, |k| want.map(|w| w.min(k as u64)));
        if want != Some(hits.len() as u64) {
            mismatches += 1;
        }
        blocks += p.data_blocks_read;
        min_blocks += p.min_data_blocks;
        index_blocks += p.index_blocks_read;
        stale += p.stale;
    }
    let mut us: Vec<f64> = lat
        .iter()
        .map(|d: &Duration| d.as_secs_f64() * 1e6)
        .collect();
    us.sort_by(f64::total_cmp);
    let n = set.queries.len().max(1) as f64;
    Ok(QueryResult {
        attribute: set.attribute.clone(),
        class: set.class.clone(),
        top_k,
        count: set.queries.len(),
        mean_us: us.iter().sum::<f64>() / n,
        p50_us: percentile(&us, 0.5),
        p95_us: percentile(&us, 0.95),
        p99_us: percentile(&us, 0.99),
        results_mean: results as f64 / n,
        blocks_read_mean: blocks as f64 / n,
        min_blocks_mean: min_blocks as f64 / n,
        index_blocks_mean: index_blocks as f64 / n,
        stale_mean: stale as f64 / n,
        calibrated_mean: set.achieved_mean,
        mismatches,
    })
}

pub fn run(args: &RunArgs) -> Result<(), CliError> {
    let systems = parse_systems(&args.systems)?;
    let top_ks: Vec<usize> = args
        .top_k
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| CliError::Other(format!("bad --top-k value {s:?}")))
        })
        .collect::<Result<_, _>>()?;
    let w = match args.workload.as_str() {
        "static-tweets" => static_tweets(args.records, args.queries, args.seed),
        "static-buildings" => static_buildings(args.records, args.queries, args.seed),
        other => {
            return Err(CliError::Other(format!(
                "unknown workload {other:?} (available: static-tweets, static-buildings)"
            )))
        }
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| CliError::Other(format!("create {}: {e}", args.out.display())))?;
    let (_tmp, base) = match &args.work_dir {
        Some(d) => (None, d.clone()),
        None => {
            let t = crate::bench::make_temp_dir()?;
            let p = t.0.clone();
            (Some(t), p)
        }
    };
    let mut results = RunResults {
        workload: args.workload.clone(),
        records: args.records,
        seed: args.seed,
        direct_io: args.direct_io,
        systems: Vec::new(),
    };
    for (i, sys) in systems.iter().enumerate() {
        let dir = base.join(format!("sys{i}"));
        results
            .systems
            .push(run_system(sys, &w, args, &dir, &top_ks)?);
    }
    let json =
        serde_json::to_string_pretty(&results).map_err(|e| CliError::Other(e.to_string()))?;
    let path = args.out.join("results.json");
    std::fs::write(&path, json)
        .map_err(|e| CliError::Other(format!("write {}: {e}", path.display())))?;
    print_table(&results)?;
    let report = write_report(&results, &args.out)?;
    crate::out(format_args!(
        "results: {}\nreport:  {}\n",
        path.display(),
        report.display()
    ))
}
