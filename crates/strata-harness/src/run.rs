//! `strata bench run`, `bench replay` and `bench trace`: the papers'
//! experiments, side by side, on every system of `--systems`.
//!
//! A workload is written once as a [`Trace`] (in memory) and replayed
//! identically by every system through the [`BenchSystem`] interface:
//! open a fresh database with the workload's indexes, do the load, settle
//! (flush, finish compactions), reopen, then run the static query sets
//! and/or the mixed sequence. Every query's result count is checked
//! against the exact count (calibrated query sets, or the trace's
//! in-memory oracle), and in mixed and replayed sequences also against
//! the first system's count for the same operation. Results go to
//! `DIR/results.json` (see docs/benchmarks.md), `DIR/report.md` and a
//! table on stdout; the command exits 1 if any count was wrong.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::json;
use strata_bench::queries::QuerySet;
use strata_bench::system::{BenchSystem, QueryStats, Sizes, SystemOptions};

use crate::progress::Progress;
use crate::registry::{self, SystemSpec};
use crate::report::write_report;
use crate::Error;
use strata_bench::chirp;
use strata_bench::perseid;
use strata_bench::results::{MixedInterval, OpSummary, QueryResult, RunResults, SystemResult};
use strata_bench::trace::{self as bench_trace, MixedCfg, Op, OpKind, StaticCfg, Style, Trace};

/// Workloads of `bench run` (besides PERSEID's,
/// [`strata_bench::perseid::WORKLOADS`]).
pub const WORKLOADS: [&str; 9] = [
    "static-tweets",
    "static-buildings",
    "skew",
    "multi-index",
    "delta-sweep",
    "mixed-write-heavy",
    "mixed-read-heavy",
    "mixed-update-heavy",
    "time-range",
];

/// Systems of `time-range` when `--systems` is not given: the range
/// filter under its three maintenance modes, a full scan (no index), NEXT
/// and embedded on the same attribute.
pub const TIME_RANGE_SYSTEMS: &str = "strata:filter,strata:filter[maintain=eager],\
strata:filter[maintain=validation],strata:none,strata:next,strata:embedded";

/// Systems when `--systems` is not given.
pub const DEFAULT_SYSTEMS: &str = "strata:none,strata:next";

/// Systems of `delta-sweep` when `--systems` is not given: δ off, 1, 4
/// and 16 times the data's mean value gap, and auto (8 times the mean gap
/// per table; see [`crate::strata_system`]).
pub const DELTA_SWEEP_SYSTEMS: &str = "strata:next[delta=off],strata:next[delta=1x],\
strata:next[delta=4x],strata:next[delta=auto],strata:next[delta=16x]";

/// Arguments of `bench run` (defaults: [`RunConfig::new`]).
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Workload: static-tweets, static-buildings, skew, multi-index,
    /// delta-sweep, mixed-write-heavy, mixed-read-heavy, mixed-update-heavy,
    /// time-range (range filters, Luo & Carey §6.4.2), PERSEID §5's
    /// perseid-insert, perseid-upsert-{uniform,skew-pri,skew-sec},
    /// perseid-mixed-{write-heavy,balanced,read-heavy}, perseid-recovery
    /// (see docs/benchmarks.md).
    pub workload: String,
    /// Records to generate and load (mixed workloads: the preload).
    pub records: u64,
    /// Queries per calibrated query set (mixed workloads cycle through them).
    pub queries: usize,
    /// Comma-separated systems: `strata:none`, `strata:next`,
    /// `strata:next[delta=off]`,
    /// `strata:<strategy>[key=value;key@index=value]`, or a peer (`rocksdb`,
    /// `sqlite`, `fjall`; needs `--features peers`). Default:
    /// `strata:none,strata:next` (delta-sweep: its δ sweep, see
    /// [`DELTA_SWEEP_SYSTEMS`]).
    pub systems: Option<String>,
    /// Static workloads: top-K variants to run besides the full queries
    /// (comma-separated). Mixed workloads: one K, the limit of every query.
    pub top_k: String,
    /// Seed of the generated data, query sets and operation mix.
    pub seed: u64,
    /// Static workloads: fraction of the load's writes that update an
    /// already-written key with new attribute values, in [0, 1). Queries
    /// are calibrated and counted on the final records.
    pub update_fraction: Option<f64>,
    /// Mixed workloads: operations after the preload (default: records/2).
    pub ops: Option<u64>,
    /// Mixed workloads: selectivity class of the queries (small, medium,
    /// large; default small).
    pub query_class: Option<String>,
    /// Mixed workloads: fraction of the query share done as primary-key
    /// gets (LevelDB++ Table 7b: 0.75), in [0, 1]; default 0.
    pub get_fraction: Option<f64>,
    /// Mixed workloads: operations per latency interval (default ops/50).
    pub interval: Option<u64>,
    /// Cache, I/O mode and output directories.
    pub output: Output,
}

/// Options of `bench run` and `bench replay`: the systems' cache and I/O
/// mode, and where results and databases go.
#[derive(Debug, Clone)]
pub struct Output {
    /// Block / page cache of every system, in MiB (paper preset: 64).
    pub cache_mb: u64,
    /// Read tables with O_DIRECT (cold reads) where the system supports it.
    pub direct_io: bool,
    /// Read tables through memory mappings where the system supports it.
    pub mmap_reads: bool,
    /// Index-only queries: keys without records (Strata systems).
    pub keys_only: bool,
    /// Strata systems: tiered compaction of the primary (PERSEID §4.4).
    pub tiered: bool,
    /// Strata systems: threads per query (`None`: the engine's default).
    pub query_threads: Option<usize>,
    /// Output directory (created).
    pub out: PathBuf,
    /// Where the databases are built (default: a temporary directory).
    pub work_dir: Option<PathBuf>,
    /// Leave each system's database in `work_dir/sysN` after its run
    /// (needs `work_dir`), for inspection or further measurements.
    pub keep_dbs: bool,
}

impl Output {
    fn system_options(&self) -> SystemOptions {
        SystemOptions {
            cache_bytes: self.cache_mb.saturating_mul(1 << 20),
            direct_io: self.direct_io,
            mmap_reads: self.mmap_reads,
            sync: false,
            keys_only: self.keys_only,
            tiered: self.tiered,
            query_threads: self.query_threads,
        }
    }
}

impl RunConfig {
    /// Arguments of a run with every option at its default.
    pub fn new(workload: &str, records: u64, out: PathBuf) -> RunConfig {
        RunConfig {
            workload: workload.into(),
            records,
            queries: 1000,
            systems: None,
            top_k: String::new(),
            seed: 42,
            update_fraction: None,
            ops: None,
            query_class: None,
            get_fraction: None,
            interval: None,
            output: Output {
                cache_mb: 64,
                direct_io: false,
                mmap_reads: false,
                keys_only: false,
                tiered: false,
                query_threads: None,
                out,
                work_dir: None,
                keep_dbs: false,
            },
        }
    }
}

/// Trace file formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Chirp: `<ts>\tw\t<json>`, `<ts>\trp\t<pk>`, `<ts>\trs\t<k>[\t<hi>]`.
    Chirp,
}

/// Arguments of `bench replay`.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// The trace file.
    pub file: PathBuf,
    /// Format of the trace file.
    pub format: TraceFormat,
    /// JSON field of the secondary key (`rs` lines), an integer.
    pub attribute: String,
    /// Limit of every secondary query (LevelDB++ and PERSEID use 10).
    pub top_k: Option<usize>,
    /// Comma-separated systems (as for `bench run`).
    pub systems: String,
    /// Operations per latency interval (default: operations/50).
    pub interval: Option<u64>,
    /// Cache, I/O mode and output directories.
    pub output: Output,
}

/// Arguments of `bench trace`.
#[derive(Debug, Clone)]
pub struct TraceConfig {
    /// Format of the written trace.
    pub format: TraceFormat,
    /// A mixed workload: mixed-write-heavy, mixed-read-heavy,
    /// mixed-update-heavy (queries on UserID only).
    pub workload: String,
    /// Tweets written first (the preload).
    pub records: u64,
    /// Operations after the preload (default: records/2).
    pub ops: Option<u64>,
    /// Seed of the tweets, query sets and operation mix.
    pub seed: u64,
    /// Queries per calibrated set (cycled through).
    pub queries: usize,
    /// Selectivity class of the `rs` ranges: small, medium, large.
    pub query_class: String,
    /// Fraction of the read share written as `rp` (primary) reads.
    pub get_fraction: f64,
    /// Output file.
    pub out: PathBuf,
}

// ------------------------------------------------------------ statistics

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// A sum of counters some systems cannot report.
#[derive(Default, Clone, Copy)]
struct OptSum {
    sum: u64,
    missing: bool,
}

impl OptSum {
    fn add(&mut self, v: Option<u64>) {
        match v {
            Some(x) => self.sum += x,
            None => self.missing = true,
        }
    }
}

/// Thread CPU time of a sample of operations: µs in all, and how many.
#[derive(Clone, Copy, Default)]
struct CpuSample {
    us: f64,
    n: u64,
}

impl CpuSample {
    fn add(&mut self, us: f64) {
        self.us += us;
        self.n += 1;
    }
}

/// A mixed run reads the thread's CPU clock around one put or get in
/// this many of each kind (and around every query). The clock is a
/// system call, whose own cost and cache footprint fell on the next
/// operation: read around every put it added 0.1–0.3 µs to the mean PUT
/// of a chirp replay, which a peer's replay without it does not pay.
const CPU_SAMPLE_EVERY: u64 = 8;

/// Measurements of one query set (or one mixed label).
#[derive(Default)]
struct SetAcc {
    lat_us: Vec<f64>,
    /// Thread CPU time of the queries (mixed runs only; every query).
    cpu: CpuSample,
    results: u64,
    blocks: OptSum,
    min_blocks: OptSum,
    index_blocks: OptSum,
    stale: OptSum,
    components: OptSum,
    components_min: OptSum,
    /// Sum of the floors in µs; `None` once a query's floor is unknown.
    floor_us: Option<f64>,
    floors: usize,
    mismatches: u64,
}

impl SetAcc {
    fn add_floor(&mut self, floor_s: Option<f64>) {
        self.floors += 1;
        self.floor_us = match (self.floors, self.floor_us, floor_s) {
            (1, _, Some(f)) => Some(f * 1e6),
            (_, Some(sum), Some(f)) => Some(sum + f * 1e6),
            _ => None,
        };
    }

    fn add(&mut self, us: f64, s: &QueryStats) {
        self.lat_us.push(us);
        self.results += s.results;
        self.blocks.add(s.data_blocks_read);
        self.min_blocks.add(s.min_data_blocks);
        self.index_blocks.add(s.index_blocks_read);
        self.stale.add(s.stale);
        self.components.add(s.components_scanned);
        self.components_min.add(s.components_min);
    }

    fn finish(
        mut self,
        attribute: &str,
        class: &str,
        top_k: Option<usize>,
        calibrated_mean: f64,
    ) -> QueryResult {
        self.lat_us.sort_by(f64::total_cmp);
        let us = &self.lat_us;
        let n = us.len().max(1) as f64;
        let mut unknown = Vec::new();
        let mut mean = |name: &str, s: OptSum| {
            if s.missing {
                unknown.push(name.to_string());
                0.0
            } else {
                s.sum as f64 / n
            }
        };
        let blocks_read_mean = mean("blocks_read_mean", self.blocks);
        let min_blocks_mean = mean("min_blocks_mean", self.min_blocks);
        let index_blocks_mean = mean("index_blocks_mean", self.index_blocks);
        let stale_mean = mean("stale_mean", self.stale);
        let opt_mean = |s: OptSum| (!s.missing).then(|| s.sum as f64 / n);
        let components_scanned_mean = opt_mean(self.components);
        let components_min_mean = opt_mean(self.components_min);
        let mean_us = us.iter().sum::<f64>() / n;
        let floor_us_mean = match self.floor_us {
            Some(f) if self.floors > 0 => f / self.floors as f64,
            _ => {
                unknown.push("floor_us_mean".to_string());
                0.0
            }
        };
        let floor_multiple = if floor_us_mean > 0.0 {
            mean_us / floor_us_mean
        } else {
            0.0
        };
        QueryResult {
            attribute: attribute.to_string(),
            class: class.to_string(),
            top_k,
            count: us.len(),
            mean_us,
            p50_us: percentile(us, 0.5),
            p95_us: percentile(us, 0.95),
            p99_us: percentile(us, 0.99),
            results_mean: self.results as f64 / n,
            blocks_read_mean,
            min_blocks_mean,
            index_blocks_mean,
            stale_mean,
            floor_us_mean,
            floor_multiple,
            calibrated_mean,
            mismatches: self.mismatches,
            unknown,
            components_scanned_mean,
            components_min_mean,
        }
    }
}

/// The summary of operations `op` with latencies `lat_us` and, if
/// measured, `cpu`: the thread CPU time of a sample of them, µs in all,
/// and how many they were.
fn op_summary(op: &str, lat_us: &mut [f64], cpu: Option<CpuSample>) -> OpSummary {
    lat_us.sort_by(f64::total_cmp);
    let n = lat_us.len();
    let total: f64 = lat_us.iter().sum();
    OpSummary {
        cpu_mean_us: cpu.and_then(|c| (c.n > 0).then(|| c.us / c.n as f64)),
        op: op.to_string(),
        count: n as u64,
        ops_per_sec: if total > 0.0 {
            n as f64 / (total / 1e6)
        } else {
            0.0
        },
        mean_us: total / n.max(1) as f64,
        p50_us: percentile(lat_us, 0.5),
        p95_us: percentile(lat_us, 0.95),
        p99_us: percentile(lat_us, 0.99),
        mismatches: 0,
    }
}

/// The `ops` row of the queries of label `li`: `query:<class>` when every
/// label is on one index (a chirp replay: `query:lookup`, `query:range`),
/// else `query:<index>/<class>`.
fn label_op_name(trace: &Trace, li: usize) -> String {
    let Some(l) = trace.labels.get(li) else {
        return "query".into();
    };
    if trace.labels.iter().all(|x| x.index == l.index) {
        format!("query:{}", l.class)
    } else {
        format!("query:{}/{}", l.index, l.class)
    }
}

fn kind_index(k: OpKind) -> usize {
    OpKind::ALL.iter().position(|x| *x == k).unwrap_or(0)
}

// ------------------------------------------------------------ running

/// Settings shared by every system of a run.
struct Exec {
    /// Static workloads: top-K variants besides the full queries.
    top_ks: Vec<usize>,
    /// Mixed / replay: the limit of every query.
    limit: Option<usize>,
    interval: u64,
    opts: SystemOptions,
}

/// What one system returned for each operation of the mixed sequence.
struct MixedObs {
    /// Gets: 1 if found; queries: the result count; `None` if not run.
    counts: Vec<Option<u64>>,
    /// Differs from the trace's expectation.
    wrong: Vec<bool>,
    /// Position in `SystemResult::queries` of each label's entry.
    label_pos: Vec<Option<usize>>,
}

fn sys_err(e: String) -> Error {
    Error::Other(e)
}

fn fill_sizes(r: &mut SystemResult, z: Sizes) {
    r.db_bytes = z.db_bytes;
    let mut unknown = Vec::new();
    r.index_bytes = z.index_bytes.unwrap_or_else(|| {
        unknown.push("index_bytes".to_string());
        0
    });
    r.index_memory_bytes = z.index_memory_bytes.unwrap_or_else(|| {
        unknown.push("index_memory_bytes".to_string());
        0
    });
    r.write_amplification = z.write_amplification.unwrap_or_else(|| {
        unknown.push("write_amplification".to_string());
        0.0
    });
    r.write_stall_seconds = z.write_stall_seconds;
    r.unknown = unknown;
}

fn run_system(
    spec: &SystemSpec,
    trace: &Trace,
    exec: &Exec,
    dir: &Path,
    keep: bool,
) -> Result<(SystemResult, Option<MixedObs>), Error> {
    let name = spec.name().to_string();
    if dir.exists() {
        std::fs::remove_dir_all(dir)
            .map_err(|e| Error::Other(format!("remove {}: {e}", dir.display())))?;
    }
    let mut result = SystemResult {
        system: name.clone(),
        params: spec
            .applied_params(&trace.indexes, &trace.gaps)
            .map_err(sys_err)?,
        ..SystemResult::default()
    };
    let mut sys = spec
        .open(dir, &trace.indexes, &trace.gaps, &exec.opts)
        .map_err(sys_err)?;

    let mut bar = Progress::new(format!("{name}: load"), trace.load.len() as u64);
    let cpu = process_cpu_seconds();
    let t = Instant::now();
    for (i, p) in trace.load.iter().enumerate() {
        sys.put(&p.key, &p.value).map_err(sys_err)?;
        bar.tick(i as u64 + 1);
    }
    result.ingest_seconds = t.elapsed().as_secs_f64();
    bar.finish();
    let t = Instant::now();
    sys.settle().map_err(sys_err)?;
    result.settle_seconds = t.elapsed().as_secs_f64();
    // Systems run one after another in this process: the CPU used from
    // the first write to the settled tree is this system's (its writer and
    // its background threads), plus the progress bar's few redraws.
    result.ingest_cpu_seconds = Some(process_cpu_seconds() - cpu);
    if trace.ops.is_empty() {
        fill_sizes(&mut result, sys.sizes().map_err(sys_err)?);
    }
    let t = Instant::now();
    sys.reopen().map_err(sys_err)?;
    result.reopen_seconds = t.elapsed().as_secs_f64();

    if sys.supports_queries() && !trace.sets.is_empty() {
        for top_k in std::iter::once(None).chain(exec.top_ks.iter().map(|k| Some(*k))) {
            let phase = match top_k {
                Some(k) => format!("{name}: queries top-{k}"),
                None => format!("{name}: queries"),
            };
            // Direct I/O is cold by design; otherwise every set starts
            // from a warm page cache.
            let warm = (!exec.opts.direct_io).then_some(dir);
            result.queries.extend(run_sets(
                sys.as_mut(),
                &trace.sets,
                trace.interleave,
                top_k,
                &phase,
                warm,
            )?);
        }
    }
    let obs = if trace.ops.is_empty() {
        None
    } else {
        let obs = run_mixed(sys.as_mut(), trace, exec, &mut result)?;
        sys.settle().map_err(sys_err)?;
        fill_sizes(&mut result, sys.sizes().map_err(sys_err)?);
        Some(obs)
    };
    drop(sys);
    if !keep {
        // Best effort: the next system needs the space, not this directory.
        let _ = std::fs::remove_dir_all(dir);
    }
    Ok((result, obs))
}

/// Reads every file under `dir` once (1 MiB at a time, contents
/// discarded), so that the OS page cache holds the database. The page
/// cache of these machines shrinks by itself (a 68 MB table lost 2.5% of
/// its resident pages in 30 s with no reclaim counted in `/proc/vmstat`),
/// so a set run minutes after the load found part of its blocks on disk:
/// NEXT's `user_id eq` top-10 took 430 µs for 10 blocks, 36 µs warm.
/// Best effort: files that vanish or fail to read are skipped.
fn warm_page_cache(dir: &Path) {
    use std::io::Read;
    let mut buf = vec![0u8; 1 << 20];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(path),
                Ok(t) if t.is_file() => {
                    let Ok(mut f) = std::fs::File::open(&path) else {
                        continue;
                    };
                    while f.read(&mut buf).is_ok_and(|n| n > 0) {}
                }
                _ => {}
            }
        }
    }
}

/// Runs the static query sets once (full queries, or at most `top_k`
/// results each), set after set or round-robin. With `warm`, the files
/// under it are read into the page cache before each set (before all of
/// them when interleaved), untimed.
fn run_sets(
    sys: &mut dyn BenchSystem,
    sets: &[QuerySet],
    interleave: bool,
    top_k: Option<usize>,
    phase: &str,
    warm: Option<&Path>,
) -> Result<Vec<QueryResult>, Error> {
    let order: Vec<(usize, usize)> = if interleave {
        let longest = sets.iter().map(|s| s.queries.len()).max().unwrap_or(0);
        (0..longest)
            .flat_map(|q| {
                sets.iter()
                    .enumerate()
                    .filter(move |(_, s)| q < s.queries.len())
                    .map(move |(i, _)| (i, q))
            })
            .collect()
    } else {
        sets.iter()
            .enumerate()
            .flat_map(|(i, s)| (0..s.queries.len()).map(move |q| (i, q)))
            .collect()
    };
    let mut accs: Vec<SetAcc> = sets.iter().map(|_| SetAcc::default()).collect();
    let mut bar = Progress::new(phase, order.len() as u64);
    let mut warmed: Option<usize> = None;
    for (n, &(si, qi)) in order.iter().enumerate() {
        let set = &sets[si];
        if let Some(dir) = warm {
            if warmed.is_none() || (!interleave && warmed != Some(si)) {
                warm_page_cache(dir);
                warmed = Some(si);
            }
        }
        let t = Instant::now();
        let s = sys
            .query(&set.attribute, &set.queries[qi], top_k)
            .map_err(sys_err)?;
        let us = t.elapsed().as_secs_f64() * 1e6;
        let want = set
            .expected_counts
            .get(qi)
            .map(|&w| top_k.map_or(w, |k| w.min(k as u64)));
        if want != Some(s.results) {
            accs[si].mismatches += 1;
        }
        accs[si].add(us, &s);
        bar.tick(n as u64 + 1);
    }
    // The floors, in a pass of their own: each query again (untimed), then
    // the reads of its blocks. Measured between the timed queries, those
    // reads (and locating the results) evicted what the next query would
    // find in the CPU caches, which the peers, measuring no floor, did not
    // pay: +37% on the median of NEXT's user_id eq class at 200 k tweets.
    if sys.measures_floor() {
        let mut bar = Progress::new(format!("{phase} (floors)"), order.len() as u64);
        for (n, &(si, qi)) in order.iter().enumerate() {
            let set = &sets[si];
            sys.query(&set.attribute, &set.queries[qi], top_k)
                .map_err(sys_err)?;
            accs[si].add_floor(sys.floor_seconds().map_err(sys_err)?);
            bar.tick(n as u64 + 1);
        }
    } else {
        for acc in &mut accs {
            acc.add_floor(None);
        }
    }
    Ok(accs
        .into_iter()
        .zip(sets)
        .map(|(a, s)| a.finish(&s.attribute, &s.class, top_k, s.achieved_mean))
        .collect())
}

/// Runs the mixed sequence, filling `result.mixed`, `result.ops` and one
/// `result.queries` entry per label; mismatches are filled in later by
/// [`cross_check`].
fn run_mixed(
    sys: &mut dyn BenchSystem,
    trace: &Trace,
    exec: &Exec,
    result: &mut SystemResult,
) -> Result<MixedObs, Error> {
    let n = trace.ops.len();
    let queries_ok = sys.supports_queries();
    let mut obs = MixedObs {
        counts: vec![None; n],
        wrong: vec![false; n],
        label_pos: vec![None; trace.labels.len()],
    };
    let mut lat: [Vec<f64>; 4] = Default::default();
    let mut labels: Vec<SetAcc> = trace.labels.iter().map(|_| SetAcc::default()).collect();
    let mut iv_sum = [0f64; 4];
    let mut iv_n = [0u64; 4];
    let mut cpu_sum = [CpuSample::default(); 4];
    // Operations of each kind so far (which of them to sample).
    let mut seen = [0u64; 4];
    let interval = exec.interval.max(1);
    let mut bar = Progress::new(format!("{}: {}", result.system, trace.workload), n as u64);
    let start = Instant::now();
    for (i, op) in trace.ops.iter().enumerate() {
        let kind = op.kind();
        let mut stats: Option<(usize, QueryStats)> = None;
        // Read outside the timed span: the clock's system call is not
        // in the latency (but see `CPU_SAMPLE_EVERY`).
        let k = kind_index(kind);
        let sampled = matches!(op, Op::Query { .. }) || seen[k] % CPU_SAMPLE_EVERY == 0;
        seen[k] += 1;
        let cpu0 = sampled.then(thread_cpu_us);
        let t = Instant::now();
        let ran = match op {
            Op::Put(p) => {
                sys.put(&p.key, &p.value).map_err(sys_err)?;
                true
            }
            Op::Get { key, expect_found } => {
                let found = sys.get(key).map_err(sys_err)?.is_some();
                obs.counts[i] = Some(u64::from(found));
                obs.wrong[i] = found != *expect_found;
                true
            }
            Op::Query {
                label,
                query,
                expected,
            } if queries_ok => {
                let index = &trace.labels[*label].index;
                let s = sys.query(index, query, exec.limit).map_err(sys_err)?;
                obs.counts[i] = Some(s.results);
                let want = expected.map(|w| exec.limit.map_or(w, |k| w.min(k as u64)));
                obs.wrong[i] = want.is_some_and(|w| w != s.results);
                stats = Some((*label, s));
                true
            }
            Op::Query { .. } => false,
        };
        if ran {
            let us = t.elapsed().as_secs_f64() * 1e6;
            let cpu = cpu0.map(|c0| thread_cpu_us() - c0);
            if let Some((label, s)) = stats {
                labels[label].add(us, &s);
                if let Some(c) = cpu {
                    labels[label].cpu.add(c);
                }
            }
            if let Some(c) = cpu {
                cpu_sum[k].add(c);
            }
            lat[k].push(us);
            iv_sum[k] += us;
            iv_n[k] += 1;
        }
        if (i + 1) % interval as usize == 0 || i + 1 == n {
            let total_n: u64 = iv_n.iter().sum();
            let mean = |k: OpKind| {
                let j = kind_index(k);
                (iv_n[j] > 0).then(|| iv_sum[j] / iv_n[j] as f64)
            };
            result.mixed.push(MixedInterval {
                ops_done: i as u64 + 1,
                mean_us: if total_n > 0 {
                    iv_sum.iter().sum::<f64>() / total_n as f64
                } else {
                    0.0
                },
                insert_mean_us: mean(OpKind::Insert),
                update_mean_us: mean(OpKind::Update),
                query_mean_us: mean(OpKind::Query),
                get_mean_us: mean(OpKind::Get),
            });
            iv_sum = [0.0; 4];
            iv_n = [0; 4];
        }
        bar.tick(i as u64 + 1);
    }
    result.mixed_seconds = start.elapsed().as_secs_f64();
    for ((k, l), cpu) in OpKind::ALL.iter().zip(lat.iter_mut()).zip(cpu_sum) {
        if !l.is_empty() {
            result.ops.push(op_summary(k.name(), l, Some(cpu)));
        }
    }
    // With queries of several classes (a chirp replay's LOOKUP and
    // RANGELOOKUP), one row per class too, after the `query` row.
    if labels.iter().filter(|a| !a.lat_us.is_empty()).count() > 1 {
        for (li, acc) in labels.iter().enumerate() {
            if !acc.lat_us.is_empty() {
                let mut lat = acc.lat_us.clone();
                result.ops.push(op_summary(
                    &label_op_name(trace, li),
                    &mut lat,
                    Some(acc.cpu),
                ));
            }
        }
    }
    for (li, (acc, label)) in labels.into_iter().zip(&trace.labels).enumerate() {
        if !acc.lat_us.is_empty() {
            obs.label_pos[li] = Some(result.queries.len());
            result.queries.push(acc.finish(
                &label.index,
                &label.class,
                exec.limit,
                label.calibrated_mean,
            ));
        }
    }
    Ok(obs)
}

/// Counts mismatches of the mixed sequence: an operation is wrong if its
/// count differs from the trace's expectation or from the first system's
/// (for queries: the first system that runs queries).
fn cross_check(trace: &Trace, results: &mut [SystemResult], obs: &[MixedObs]) {
    let reference_get = obs.first();
    let reference_query = obs.iter().find(|o| o.label_pos.iter().any(Option::is_some));
    for (r, o) in results.iter_mut().zip(obs) {
        for (i, op) in trace.ops.iter().enumerate() {
            let Some(got) = o.counts[i] else { continue };
            let reference = match op {
                Op::Query { .. } => reference_query,
                _ => reference_get,
            };
            let disagrees = reference
                .and_then(|x| x.counts[i])
                .is_some_and(|want| want != got);
            if !(o.wrong[i] || disagrees) {
                continue;
            }
            let kind = op.kind().name();
            if let Some(s) = r.ops.iter_mut().find(|s| s.op == kind) {
                s.mismatches += 1;
            }
            if let Op::Query { label, .. } = op {
                if let Some(p) = o.label_pos[*label] {
                    r.queries[p].mismatches += 1;
                }
                let row = label_op_name(trace, *label);
                if let Some(s) = r.ops.iter_mut().find(|s| s.op == row) {
                    s.mismatches += 1;
                }
            }
        }
    }
}

/// The results document of `trace` run on `systems`.
fn assemble(
    trace: &Trace,
    exec: &Exec,
    output: &Output,
    seed: u64,
    systems: Vec<SystemResult>,
) -> RunResults {
    let mut parameters = trace.parameters.clone();
    if let Some(n) = output.query_threads {
        parameters.insert("query_threads".into(), json!(n));
    }
    parameters.insert("cache_bytes".into(), json!(exec.opts.cache_bytes));
    if !exec.top_ks.is_empty() {
        parameters.insert("top_k_variants".into(), json!(exec.top_ks));
    }
    if !trace.ops.is_empty() {
        parameters.insert("top_k".into(), json!(exec.limit));
        parameters.insert("interval".into(), json!(exec.interval));
    }
    parameters.insert(
        "indexes".into(),
        json!(trace.indexes.iter().map(|d| &d.name).collect::<Vec<_>>()),
    );
    RunResults {
        workload: trace.workload.clone(),
        records: trace.records,
        seed,
        direct_io: output.direct_io,
        mmap_reads: output.mmap_reads,
        systems,
        parameters,
    }
}

/// Writes `results` as pretty JSON to `path` (through a temporary file, so
/// a reader never sees half a document).
fn write_json(path: &Path, results: &RunResults) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(results).map_err(|e| Error::Other(e.to_string()))?;
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)
        .map_err(|e| Error::Other(format!("write {}: {e}", tmp.display())))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| Error::Other(format!("rename to {}: {e}", path.display())))
}

/// What a run or replay produced (written to `out` before returning).
#[derive(Debug)]
pub struct Outcome {
    /// The document written to `results.json`.
    pub results: RunResults,
    /// `DIR/results.json`.
    pub results_path: PathBuf,
    /// `DIR/report.md`.
    pub report_path: PathBuf,
    /// The workload had a mixed or replayed sequence (per-operation
    /// summaries in `results`).
    pub mixed: bool,
    /// Operations that returned a wrong result count (0 in a correct run).
    pub mismatches: u64,
}

impl Outcome {
    /// The error a command reports after printing its outputs, if any
    /// result count was wrong.
    pub fn check(&self) -> Result<(), Error> {
        if self.mismatches > 0 {
            return Err(Error::Failed(format!(
                "error: {} operations returned a wrong result count (see `mismatches` in {})",
                self.mismatches,
                self.results_path.display()
            )));
        }
        Ok(())
    }
}

/// Runs `trace` on every system and writes `results.json` and the report;
/// a wrong result count is reported in [`Outcome::mismatches`], not as an
/// error.
fn execute(
    trace: &Trace,
    systems: &[SystemSpec],
    exec: &Exec,
    output: &Output,
    seed: u64,
) -> Result<Outcome, Error> {
    let out = output.out.as_path();
    std::fs::create_dir_all(out)
        .map_err(|e| Error::Other(format!("create {}: {e}", out.display())))?;
    if output.keep_dbs && output.work_dir.is_none() {
        return Err(Error::Other(
            "keeping the databases needs a work directory (--work-dir)".into(),
        ));
    }
    let (_tmp, base) = match &output.work_dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::Other(format!("create {}: {e}", d.display())))?;
            (None, d.to_path_buf())
        }
        None => {
            let t = crate::db_bench::make_temp_dir()?;
            let p = t.0.clone();
            (Some(t), p)
        }
    };
    let mut systems_out = Vec::new();
    let mut obs = Vec::new();
    let partial = out.join("results.partial.json");
    for (i, spec) in systems.iter().enumerate() {
        let dir = base.join(format!("sys{i}"));
        let (r, o) = run_system(spec, trace, exec, &dir, output.keep_dbs)?;
        systems_out.push(r);
        obs.extend(o);
        if i + 1 < systems.len() {
            // A long run keeps what it has measured: the systems so far,
            // not yet cross-checked, replaced after each system and
            // removed once results.json is written.
            let so_far = assemble(trace, exec, output, seed, systems_out.clone());
            write_json(&partial, &so_far)?;
        }
    }
    if obs.len() == systems_out.len() && !obs.is_empty() {
        cross_check(trace, &mut systems_out, &obs);
    }
    let results = assemble(trace, exec, output, seed, systems_out);
    let path = out.join("results.json");
    write_json(&path, &results)?;
    if partial.exists() {
        std::fs::remove_file(&partial)
            .map_err(|e| Error::Other(format!("remove {}: {e}", partial.display())))?;
    }
    let report = write_report(&results, out)?;
    let mismatches: u64 = results
        .systems
        .iter()
        .map(|s| {
            s.queries.iter().map(|q| q.mismatches).sum::<u64>()
                + s.ops
                    .iter()
                    // Query rows repeat the queries' mismatches.
                    .filter(|o| !o.op.starts_with("query"))
                    .map(|o| o.mismatches)
                    .sum::<u64>()
        })
        .sum();
    Ok(Outcome {
        results,
        results_path: path,
        report_path: report,
        mixed: !trace.ops.is_empty(),
        mismatches,
    })
}

fn parse_top_ks(s: &str) -> Result<Vec<usize>, Error> {
    s.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| match s.trim().parse::<usize>() {
            Ok(k) if k > 0 => Ok(k),
            _ => Err(Error::Other(format!(
                "bad --top-k value {s:?} (a positive integer)"
            ))),
        })
        .collect()
}

fn default_interval(ops: usize) -> u64 {
    (ops as u64 / 50).max(1)
}

/// `strata bench run`.
pub fn run(args: &RunConfig) -> Result<Outcome, Error> {
    let w = args.workload.as_str();
    if !WORKLOADS.contains(&w) && !perseid::WORKLOADS.contains(&w) {
        return Err(Error::Other(format!(
            "unknown workload {w:?} (available: {}, {})",
            WORKLOADS.join(", "),
            perseid::WORKLOADS.join(", ")
        )));
    }
    let mixed = bench_trace::mixed_ratios(w).is_some() || perseid::mixed_ratios(w).is_some();
    let only_mixed = [
        ("--ops", args.ops.is_some()),
        ("--query-class", args.query_class.is_some()),
        ("--get-fraction", args.get_fraction.is_some()),
        ("--interval", args.interval.is_some()),
    ];
    if !mixed {
        if let Some((flag, _)) = only_mixed.iter().find(|(_, given)| *given) {
            return Err(Error::Other(format!(
                "{flag} applies to the mixed workloads only, not {w}"
            )));
        }
    } else if args.update_fraction.is_some() {
        return Err(Error::Other(format!(
            "--update-fraction applies to static workloads; {w} has its own update share"
        )));
    }
    // The range-filter experiment is update-heavy unless told otherwise.
    let update_fraction = args
        .update_fraction
        .unwrap_or(if w == "time-range" { 0.5 } else { 0.0 });
    if !(0.0..1.0).contains(&update_fraction) {
        return Err(Error::Other(format!(
            "--update-fraction must be in [0, 1), got {update_fraction}"
        )));
    }
    let get_fraction = args.get_fraction.unwrap_or(0.0);
    if !(0.0..=1.0).contains(&get_fraction) {
        return Err(Error::Other(format!(
            "--get-fraction must be in [0, 1], got {get_fraction}"
        )));
    }
    let top_ks = parse_top_ks(&args.top_k)?;
    let limit = if mixed {
        match top_ks[..] {
            [] => None,
            [k] => Some(k),
            _ => {
                return Err(Error::Other(
                    "mixed workloads take one --top-k value (the limit of every query)".into(),
                ))
            }
        }
    } else {
        None
    };
    let default_systems = match w {
        "delta-sweep" => DELTA_SWEEP_SYSTEMS,
        "time-range" => TIME_RANGE_SYSTEMS,
        _ => DEFAULT_SYSTEMS,
    };
    let systems = registry::resolve_list(args.systems.as_deref().unwrap_or(default_systems))
        .map_err(Error::Other)?;

    let scfg = StaticCfg {
        records: args.records,
        queries: args.queries,
        seed: args.seed,
        update_fraction,
    };
    let trace = match w {
        "static-tweets" | "delta-sweep" => bench_trace::static_tweets(w, &scfg, false),
        "multi-index" => bench_trace::static_tweets(w, &scfg, true),
        "static-buildings" => bench_trace::static_buildings(&scfg),
        "skew" => bench_trace::skew(&scfg),
        "time-range" => bench_trace::time_range(&scfg),
        _ if perseid::mixed_ratios(w).is_some() => perseid::mixed_trace(
            w,
            args.records,
            args.ops.unwrap_or(args.records / 2),
            args.seed,
        )
        .ok_or_else(|| Error::Other(format!("unknown workload {w:?}")))?,
        _ if perseid::WORKLOADS.contains(&w) => perseid::static_trace(w, &scfg)
            .ok_or_else(|| Error::Other(format!("unknown workload {w:?}")))?,
        _ => bench_trace::mixed(&MixedCfg {
            workload: w.to_string(),
            preload: args.records,
            ops: args.ops.unwrap_or(args.records / 2),
            seed: args.seed,
            queries: args.queries,
            class: args.query_class.clone().unwrap_or_else(|| "small".into()),
            get_fraction,
            style: Style::Native,
        })
        .map_err(Error::Other)?,
    };
    let exec = Exec {
        top_ks: if mixed { Vec::new() } else { top_ks },
        limit,
        interval: args
            .interval
            .unwrap_or_else(|| default_interval(trace.ops.len())),
        opts: args.output.system_options(),
    };
    execute(&trace, &systems, &exec, &args.output, args.seed)
}

/// `strata bench replay`.
pub fn replay(args: &ReplayConfig) -> Result<Outcome, Error> {
    let systems = registry::resolve_list(&args.systems).map_err(Error::Other)?;
    if args.top_k == Some(0) {
        return Err(Error::Other("--top-k must be positive".into()));
    }
    let ops = match args.format {
        TraceFormat::Chirp => chirp::read_trace(&args.file, &args.attribute),
    }
    .map_err(Error::Other)?;
    let mut trace = bench_trace::from_chirp(ops, &args.attribute);
    trace
        .parameters
        .insert("trace".into(), json!(args.file.display().to_string()));
    trace.parameters.insert("format".into(), json!("chirp"));
    let exec = Exec {
        top_ks: Vec::new(),
        limit: args.top_k,
        interval: args
            .interval
            .unwrap_or_else(|| default_interval(trace.ops.len())),
        opts: args.output.system_options(),
    };
    execute(&trace, &systems, &exec, &args.output, 0)
}

/// What `bench trace` wrote.
#[derive(Debug, Clone)]
pub struct TraceWritten {
    /// Lines written.
    pub lines: u64,
    /// Writes of the preload (the first lines).
    pub preload: usize,
    /// Operations after the preload per kind (`insert`, `update`, `get`,
    /// `query`).
    pub counts: BTreeMap<&'static str, usize>,
}

/// `strata bench trace`: writes a mixed workload as a chirp trace.
pub fn trace(args: &TraceConfig) -> Result<TraceWritten, Error> {
    if bench_trace::mixed_ratios(&args.workload).is_none() {
        return Err(Error::Other(format!(
            "bench trace writes mixed workloads (mixed-write-heavy, mixed-read-heavy, mixed-update-heavy), not {:?}",
            args.workload
        )));
    }
    if !(0.0..=1.0).contains(&args.get_fraction) {
        return Err(Error::Other(format!(
            "--get-fraction must be in [0, 1], got {}",
            args.get_fraction
        )));
    }
    let t = bench_trace::mixed(&MixedCfg {
        workload: args.workload.clone(),
        preload: args.records,
        ops: args.ops.unwrap_or(args.records / 2),
        seed: args.seed,
        queries: args.queries,
        class: args.query_class.clone(),
        get_fraction: args.get_fraction,
        style: Style::Chirp,
    })
    .map_err(Error::Other)?;
    let TraceFormat::Chirp = args.format;
    let f = std::fs::File::create(&args.out)
        .map_err(|e| Error::Other(format!("create {}: {e}", args.out.display())))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    let lines = bench_trace::write_chirp(&t, &mut w)
        .map_err(|e| Error::Other(format!("{}: {e}", args.out.display())))?;
    std::io::Write::flush(&mut w)
        .map_err(|e| Error::Other(format!("write {}: {e}", args.out.display())))?;
    let counts: BTreeMap<&'static str, usize> = OpKind::ALL
        .iter()
        .map(|k| (k.name(), t.ops.iter().filter(|o| o.kind() == *k).count()))
        .collect();
    Ok(TraceWritten {
        lines,
        preload: t.load.len(),
        counts,
    })
}

/// CPU time the whole process (every thread) has used, in seconds.
fn process_cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// CPU time this thread has used, in µs.
fn thread_cpu_us() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e6 + t.tv_nsec as f64 / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU mean is over the sampled operations, not all of them; no
    /// sample gives no mean.
    #[test]
    fn cpu_mean_is_over_the_sample() {
        let mut lat = vec![1.0; 16];
        let s = op_summary("insert", &mut lat, Some(CpuSample { us: 6.0, n: 2 }));
        assert_eq!(s.cpu_mean_us, Some(3.0));
        assert_eq!(s.count, 16);
        let s = op_summary("insert", &mut lat, Some(CpuSample::default()));
        assert_eq!(s.cpu_mean_us, None);
        let s = op_summary("insert", &mut lat, None);
        assert_eq!(s.cpu_mean_us, None);
    }
}
