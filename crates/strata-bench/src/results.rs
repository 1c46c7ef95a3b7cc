//! The data model of `results.json` (a contract: other tools read it;
//! fields may be added, the documented ones are kept).

use std::collections::BTreeMap;

use serde::Serialize;

/// One query set's measurements (the `queries` entries of results.json).
/// Mixed and replay workloads have one entry per attribute and class of
/// the queries in the sequence.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueryResult {
    /// Index the queries ran on (its declared name).
    pub attribute: String,
    /// Selectivity class of the set (`small`, `medium`, `large`, `eq`;
    /// replay: `lookup`, `range`).
    pub class: String,
    /// Limit of every query of the set (`None`: full queries).
    pub top_k: Option<usize>,
    /// Queries run.
    pub count: usize,
    /// Mean query latency, in µs.
    pub mean_us: f64,
    /// Median query latency, in µs.
    pub p50_us: f64,
    /// 95th-percentile query latency, in µs.
    pub p95_us: f64,
    /// 99th-percentile query latency, in µs.
    pub p99_us: f64,
    /// Mean number of records a query returned.
    pub results_mean: f64,
    /// Mean data blocks fetched per query (cache hits and disk reads).
    pub blocks_read_mean: f64,
    /// Mean distinct data blocks holding a query's results (the physical
    /// minimum).
    pub min_blocks_mean: f64,
    /// Mean secondary-index blocks fetched per query.
    pub index_blocks_mean: f64,
    /// Mean candidates per query found stale by validation.
    pub stale_mean: f64,
    /// Mean physical floor of a query, in µs: the time to pread and
    /// checksum (no cache) each distinct data block holding its results,
    /// measured in the same run right after the query (0 if unknown).
    pub floor_us_mean: f64,
    /// `mean_us / floor_us_mean`: the latency as a multiple of its floor
    /// (0 if the floor is unknown or 0).
    pub floor_multiple: f64,
    /// Mean result count the query set was calibrated to.
    pub calibrated_mean: f64,
    /// Queries whose result count differs from the exact count computed
    /// over the generated data (with a top-K: from min(exact, K)); in mixed
    /// and replay workloads also those whose count differs from the first
    /// system's for the same operation. Must be 0.
    pub mismatches: u64,
    /// Counters the system could not report (their means above are 0):
    /// names among `blocks_read_mean`, `min_blocks_mean`,
    /// `index_blocks_mean`, `stale_mean`, `floor_us_mean`.
    pub unknown: Vec<String>,
    /// Range filters (`strata:filter`): mean components (memtables and
    /// tables) a query scanned; `None` for other systems.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub components_scanned_mean: Option<f64>,
    /// Range filters: mean components holding a query's results (what a
    /// perfect filter would scan).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub components_min_mean: Option<f64>,
}

/// One system's measurements (the `systems` entries of results.json).
#[derive(Debug, Clone, Default, Serialize)]
pub struct SystemResult {
    /// The system's label (`strata:next`, `sqlite`, ...).
    pub system: String,
    /// Wall time of the load phase, in seconds.
    pub ingest_seconds: f64,
    /// Time to flush and finish compactions after the last write.
    pub settle_seconds: f64,
    /// CPU time of every thread of the process (the writer, flushes and
    /// compactions) from the first write of the load to the settled tree,
    /// in seconds; `None` where not measured (replays).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ingest_cpu_seconds: Option<f64>,
    /// Time to close and reopen the database after settling, in seconds.
    pub reopen_seconds: f64,
    /// Bytes of every file of the database directory.
    pub db_bytes: u64,
    /// Bytes of the secondary indexes on disk (0 if unknown).
    pub index_bytes: u64,
    /// Resident bytes of in-memory index structures (0 if unknown).
    pub index_memory_bytes: u64,
    /// Bytes written to storage over bytes written by the user (0 if
    /// unknown).
    pub write_amplification: f64,
    /// Writers' back-pressure stalls (waiting for a flush or compaction,
    /// L0 slowdown delays) during the load, or during the mixed / replayed
    /// sequence when there is one; `None` if the system does not say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_stall_seconds: Option<f64>,
    /// One entry per static query set and top-K variant, or per attribute
    /// and class of a mixed / replayed sequence.
    pub queries: Vec<QueryResult>,
    /// Latency per interval of the mixed / replayed sequence (empty for
    /// static workloads).
    pub mixed: Vec<MixedInterval>,
    /// Per operation kind (mixed and replay workloads).
    pub ops: Vec<OpSummary>,
    /// Wall time of the mixed / replayed sequence (0 for static workloads).
    pub mixed_seconds: f64,
    /// Index parameters as applied, `index.key -> value` (Strata: after
    /// `key@index` overrides and `delta=Nx` resolution).
    pub params: BTreeMap<String, String>,
    /// Size fields the system could not report (their values above are 0):
    /// among `index_bytes`, `index_memory_bytes`, `write_amplification`.
    pub unknown: Vec<String>,
}

/// The whole `results.json` document of one run or replay.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunResults {
    /// Workload name (`replay-chirp` for replays).
    pub workload: String,
    /// Live records after the load / the preload (replay: distinct keys
    /// written).
    pub records: u64,
    /// Seed of the generators (0 for replays).
    pub seed: u64,
    /// Tables were read with direct I/O where the system supports it.
    pub direct_io: bool,
    /// Tables were read through memory mappings where the system supports
    /// it (`--mmap-reads`).
    pub mmap_reads: bool,
    /// One entry per system, in `--systems` order.
    pub systems: Vec<SystemResult>,
    /// Workload parameters (update fraction, operation mix, query class,
    /// trace file, ...), as documented in docs/benchmarks.md.
    pub parameters: BTreeMap<String, serde_json::Value>,
}

/// Mean latency over one interval of a mixed workload (`mixed` entries of
/// results.json), in microseconds; per-kind means are `None` when the
/// interval had no operation of that kind.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MixedInterval {
    /// Operations done at the end of the interval.
    pub ops_done: u64,
    /// Mean latency of every operation of the interval (0 if none ran).
    pub mean_us: f64,
    /// Mean latency of the interval's inserts.
    pub insert_mean_us: Option<f64>,
    /// Mean latency of the interval's updates.
    pub update_mean_us: Option<f64>,
    /// Mean latency of the interval's secondary queries.
    pub query_mean_us: Option<f64>,
    /// Mean latency of the interval's primary-key gets.
    pub get_mean_us: Option<f64>,
}

/// Throughput and latency of one operation kind over a whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpSummary {
    /// `insert`, `update`, `get` or `query` (see
    /// [`OpKind::name`](crate::trace::OpKind::name)); with queries of
    /// several classes also one row per class after `query`:
    /// `query:<class>` (a chirp replay: `query:lookup`, `query:range`) or
    /// `query:<index>/<class>` when the classes are on several indexes.
    pub op: String,
    /// Operations of this kind run.
    pub count: u64,
    /// `count` over the time spent in operations of this kind (not wall
    /// time), per second.
    pub ops_per_sec: f64,
    /// Mean latency, in µs.
    pub mean_us: f64,
    /// Median latency, in µs.
    pub p50_us: f64,
    /// 95th-percentile latency, in µs.
    pub p95_us: f64,
    /// 99th-percentile latency, in µs.
    pub p99_us: f64,
    /// Mean CPU time of the calling thread per operation (user and
    /// system), in µs, where measured: the rest of `mean_us` was spent
    /// waiting, for the CPU (other threads: flushes, compactions), for
    /// locks or for I/O. Measured on a sample (every query, one put or
    /// get in eight of its kind: the clock is a system call, which would
    /// slow the next operation down); includes part of the clock reads'
    /// own cost (about 0.2 µs each).
    pub cpu_mean_us: Option<f64>,
    /// Gets whose found / not-found differs from the expected state, or
    /// queries counted as in [`QueryResult::mismatches`]. Must be 0.
    pub mismatches: u64,
}
