//! Arguments of `strata bench run`, `bench replay` and `bench trace`, and
//! their conversion to the harness's configurations.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use strata_harness::run::{
    Output, ReplayConfig, RunConfig, TraceConfig, TraceFormat as Format, DEFAULT_SYSTEMS,
};

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Workload: static-tweets, static-buildings, skew, multi-index,
    /// delta-sweep, mixed-write-heavy, mixed-read-heavy, mixed-update-heavy,
    /// time-range (range filters, Luo & Carey §6.4.2), PERSEID §5's
    /// perseid-insert, perseid-upsert-{uniform,skew-pri,skew-sec},
    /// perseid-mixed-{write-heavy,balanced,read-heavy}, perseid-recovery
    /// (see docs/benchmarks.md).
    #[arg(long, default_value = "static-tweets")]
    pub workload: String,
    /// Records to generate and load (mixed workloads: the preload).
    #[arg(long, default_value_t = 200_000)]
    pub records: u64,
    /// Queries per calibrated query set (mixed workloads cycle through
    /// them). Default 1000; 20 for `time-range`, whose range-filter
    /// queries scan whole tables.
    #[arg(long)]
    pub queries: Option<u32>,
    /// Comma-separated systems: strata:none, strata:next,
    /// strata:next[delta=off], strata:<strategy>[key=value;key@index=value],
    /// or a peer (rocksdb, sqlite, fjall; needs --features peers). Default:
    /// strata:none,strata:next (delta-sweep: its δ sweep).
    #[arg(long)]
    pub systems: Option<String>,
    /// Static workloads: top-K variants to run besides the full queries
    /// (comma-separated). Mixed workloads: one K, the limit of every query.
    #[arg(long, default_value = "")]
    pub top_k: String,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Static workloads: fraction of the load's writes that update an
    /// already-written key with new attribute values, in [0, 1). Queries
    /// are calibrated and counted on the final records.
    #[arg(long)]
    pub update_fraction: Option<f64>,
    /// Mixed workloads: operations after the preload (default: records/2).
    #[arg(long)]
    pub ops: Option<u64>,
    /// Mixed workloads: selectivity class of the queries (small, medium,
    /// large; default small).
    #[arg(long)]
    pub query_class: Option<String>,
    /// Mixed workloads: fraction of the query share done as primary-key
    /// gets (LevelDB++ Table 7b: 0.75), in [0, 1]; default 0.
    #[arg(long)]
    pub get_fraction: Option<f64>,
    /// Mixed workloads: operations per latency interval (default ops/50).
    #[arg(long)]
    pub interval: Option<u64>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// Options of `bench run` and `bench replay`: the systems' cache and I/O
/// mode, and where results and databases go.
#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// Block / page cache of every system, in MiB (paper preset: 64).
    #[arg(long, default_value_t = 64)]
    pub cache_mb: u64,
    /// Read tables with O_DIRECT (cold reads) where the system supports it.
    #[arg(long)]
    pub direct_io: bool,
    /// Read tables through memory mappings where the system supports it
    /// (Strata `mmap_reads`, SQLite `mmap_size`, RocksDB
    /// `allow_mmap_reads`; fjall ignores it). Exclusive with --direct-io.
    #[arg(long, conflicts_with = "direct_io")]
    pub mmap_reads: bool,
    /// Index-only queries: Strata systems return keys without fetching the
    /// records (PERSEID §5.2.2); peers fetch them anyway.
    #[arg(long)]
    pub keys_only: bool,
    /// Strata systems: tiered compaction of the primary (size-tiered runs,
    /// PERSEID §4.4) instead of leveled.
    #[arg(long)]
    pub tiered: bool,
    /// Strata systems: threads per query (1: the querying thread alone).
    /// Default: the engine's, which reads the records of large NEXT and
    /// PERSEID queries with up to 4 threads.
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub query_threads: Option<u8>,
    /// Output directory (created).
    #[arg(long)]
    pub out: PathBuf,
    /// Where the databases are built (default: a temporary directory).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Leave each system's database in WORK_DIR/sysN (in --systems order)
    /// after its run.
    #[arg(long, requires = "work_dir")]
    pub keep_dbs: bool,
}

/// Trace file formats.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceFormat {
    /// Chirp: `<ts>\tw\t<json>`, `<ts>\trp\t<pk>`, `<ts>\trs\t<k>[\t<hi>]`.
    Chirp,
}

#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    /// The trace file.
    pub file: PathBuf,
    #[arg(long, value_enum)]
    pub format: TraceFormat,
    /// JSON field of the secondary key (`rs` lines), an integer.
    #[arg(long, default_value = "UserID")]
    pub attribute: String,
    /// Limit of every secondary query (LevelDB++ and PERSEID use 10).
    #[arg(long)]
    pub top_k: Option<usize>,
    /// Comma-separated systems (as for `bench run`).
    #[arg(long, default_value = DEFAULT_SYSTEMS)]
    pub systems: String,
    /// Operations per latency interval (default: operations/50).
    #[arg(long)]
    pub interval: Option<u64>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Args, Debug, Clone)]
pub struct TraceArgs {
    #[arg(long, value_enum)]
    pub format: TraceFormat,
    /// A mixed workload: mixed-write-heavy, mixed-read-heavy,
    /// mixed-update-heavy (queries on UserID only).
    #[arg(long, default_value = "mixed-read-heavy")]
    pub workload: String,
    /// Tweets written first (the preload).
    #[arg(long, default_value_t = 10_000)]
    pub records: u64,
    /// Operations after the preload (default: records/2).
    #[arg(long)]
    pub ops: Option<u64>,
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Queries per calibrated set (cycled through).
    #[arg(long, default_value_t = 1000)]
    pub queries: usize,
    /// Selectivity class of the `rs` ranges: small, medium, large.
    #[arg(long, default_value = "small")]
    pub query_class: String,
    /// Fraction of the read share written as `rp` (primary) reads.
    #[arg(long, default_value_t = 0.0)]
    pub get_fraction: f64,
    /// Output file.
    #[arg(long)]
    pub out: PathBuf,
}

impl From<TraceFormat> for Format {
    fn from(f: TraceFormat) -> Format {
        match f {
            TraceFormat::Chirp => Format::Chirp,
        }
    }
}

impl From<OutputArgs> for Output {
    fn from(a: OutputArgs) -> Output {
        Output {
            cache_mb: a.cache_mb,
            direct_io: a.direct_io,
            mmap_reads: a.mmap_reads,
            keys_only: a.keys_only,
            tiered: a.tiered,
            query_threads: a.query_threads.map(usize::from),
            out: a.out,
            work_dir: a.work_dir,
            keep_dbs: a.keep_dbs,
        }
    }
}

impl From<RunArgs> for RunConfig {
    fn from(a: RunArgs) -> RunConfig {
        RunConfig {
            records: a.records,
            queries: a
                .queries
                .unwrap_or(if a.workload == "time-range" { 20 } else { 1000 })
                as usize,
            workload: a.workload,
            systems: a.systems,
            top_k: a.top_k,
            seed: a.seed,
            update_fraction: a.update_fraction,
            ops: a.ops,
            query_class: a.query_class,
            get_fraction: a.get_fraction,
            interval: a.interval,
            output: a.output.into(),
        }
    }
}

impl From<ReplayArgs> for ReplayConfig {
    fn from(a: ReplayArgs) -> ReplayConfig {
        ReplayConfig {
            file: a.file,
            format: a.format.into(),
            attribute: a.attribute,
            top_k: a.top_k,
            systems: a.systems,
            interval: a.interval,
            output: a.output.into(),
        }
    }
}

impl From<TraceArgs> for TraceConfig {
    fn from(a: TraceArgs) -> TraceConfig {
        TraceConfig {
            format: a.format.into(),
            workload: a.workload,
            records: a.records,
            ops: a.ops,
            seed: a.seed,
            queries: a.queries,
            query_class: a.query_class,
            get_fraction: a.get_fraction,
            out: a.out,
        }
    }
}
