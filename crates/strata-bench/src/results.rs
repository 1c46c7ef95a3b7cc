//! The data model of `results.json` (a contract: other tools read it;
//! fields may be added, the documented ones are kept).

use std::collections::BTreeMap;

use serde::Serialize;

/// One query set's measurements (the `queries` entries of results.json).
/// Mixed and replay workloads have one entry per attribute and class of
/// the queries in the sequence.
#[derive(Debug, Clone, Default, Serialize)]
pub struct QueryResult {
    pub attribute: String,
    pub class: String,
    pub top_k: Option<usize>,
    pub count: usize,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    pub results_mean: f64,
    pub blocks_read_mean: f64,
    pub min_blocks_mean: f64,
    pub index_blocks_mean: f64,
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
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SystemResult {
    pub system: String,
    pub ingest_seconds: f64,
    /// Time to flush and finish compactions after the last write.
    pub settle_seconds: f64,
    pub reopen_seconds: f64,
    pub db_bytes: u64,
    pub index_bytes: u64,
    pub index_memory_bytes: u64,
    pub write_amplification: f64,
    pub queries: Vec<QueryResult>,
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

#[derive(Debug, Clone, Default, Serialize)]
pub struct RunResults {
    pub workload: String,
    pub records: u64,
    pub seed: u64,
    pub direct_io: bool,
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
    pub mean_us: f64,
    pub insert_mean_us: Option<f64>,
    pub update_mean_us: Option<f64>,
    pub query_mean_us: Option<f64>,
    pub get_mean_us: Option<f64>,
}

/// Throughput and latency of one operation kind over a whole run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct OpSummary {
    /// `insert`, `update`, `delete`, `query`, `get`.
    pub op: String,
    pub count: u64,
    pub ops_per_sec: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
    /// Gets whose found / not-found differs from the expected state, or
    /// queries counted as in [`QueryResult::mismatches`]. Must be 0.
    pub mismatches: u64,
}
