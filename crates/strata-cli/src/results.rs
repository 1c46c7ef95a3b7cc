//! The data model of `results.json` (a contract: other tools read it;
//! fields may be added, the documented ones are kept).

use serde::Serialize;

/// One query set's measurements (the `queries` entries of results.json).
#[derive(Debug, Clone, Serialize)]
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
    /// Mean result count the query set was calibrated to.
    pub calibrated_mean: f64,
    /// Queries whose result count differs from the exact count computed
    /// over the generated data (full queries only; must be 0).
    pub mismatches: u64,
}

#[derive(Debug, Clone, Serialize)]
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
}

#[derive(Debug, Clone, Serialize)]
pub struct RunResults {
    pub workload: String,
    pub records: u64,
    pub seed: u64,
    pub direct_io: bool,
    pub systems: Vec<SystemResult>,
}

/// Mean latency over one interval of a mixed workload (`mixed` entries of
/// results.json), in microseconds; per-kind means are `None` when the
/// interval had no operation of that kind.
#[derive(Debug, Clone, Serialize)]
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
#[derive(Debug, Clone, Serialize)]
pub struct OpSummary {
    /// `insert`, `update`, `delete`, `query`, `get`.
    pub op: String,
    pub count: u64,
    pub ops_per_sec: f64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
}
