//! `strata gen`: arguments and output lines; the data set and its
//! calibrated query sets are written by `strata_harness::dataset`.
//!
//! Output is a pure function of the arguments: the same `--seed` and
//! `--records` always give byte-identical files.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use strata_bench::gen::Dist;
use strata_harness::dataset;

/// Which data set to generate.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Geo-tagged tweets (NEXT §6.1): id, user_id, created_at, coordinates,
    /// text, ... (400–500 bytes).
    Tweets,
    /// OSM-like building footprints: id, bbox, perimeter, ... (200–300 bytes).
    Buildings,
    /// Synthetic integer attribute `attr` in 1..=10^8, uniform or Zipf
    /// (NEXT §6.5), ~400 bytes.
    Synthetic,
}

/// Arguments of `strata gen`.
#[derive(Args, Debug, Clone)]
pub struct GenArgs {
    /// Data set to generate.
    #[arg(value_enum)]
    pub kind: Kind,
    /// Number of records.
    #[arg(long, value_name = "N")]
    pub records: u64,
    /// Seed; the output is a function of (kind, records, seed, distribution).
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub seed: u64,
    /// Synthetic only: Zipf exponent of `attr` (the paper uses 0.5, 0.8, 1.0).
    #[arg(long, value_name = "S", conflicts_with = "uniform")]
    pub zipf: Option<f64>,
    /// Synthetic only: uniform `attr` (the default).
    #[arg(long)]
    pub uniform: bool,
    /// Output JSONL file: one record per line, primary key in field `id`.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Also write calibrated query sets as DIR/<attribute>-<class>.json.
    #[arg(long, value_name = "DIR")]
    pub queries: Option<PathBuf>,
    /// Queries per query set.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub query_count: usize,
}

/// Runs `strata gen`. Errors are returned as messages.
pub fn run(args: GenArgs) -> Result<(), String> {
    let dist = match (args.kind, args.zipf, args.uniform) {
        (Kind::Synthetic, Some(s), _) => {
            if !(s.is_finite() && s > 0.0) {
                return Err(format!("--zipf must be a positive number, got {s}"));
            }
            Dist::Zipf(s)
        }
        (Kind::Synthetic, None, _) => Dist::Uniform,
        (_, None, false) => Dist::Uniform,
        (k, _, _) => {
            return Err(format!(
                "--zipf/--uniform apply to `synthetic` only, not `{}`",
                k.to_possible_value()
                    .map(|v| v.get_name().to_string())
                    .unwrap_or_default()
            ))
        }
    };
    let g = dataset::generate(&dataset::GenConfig {
        kind: match args.kind {
            Kind::Tweets => dataset::Kind::Tweets,
            Kind::Buildings => dataset::Kind::Buildings,
            Kind::Synthetic => dataset::Kind::Synthetic,
        },
        records: args.records,
        seed: args.seed,
        dist,
        out: args.out.clone(),
        queries: args.queries.clone(),
        query_count: args.query_count,
    })
    .map_err(|e| e.to_string())?;
    println!("wrote {} records to {}", g.records, args.out.display());
    for (path, s) in &g.query_sets {
        println!(
            "{}: target {} achieved {:.1} param {}{}",
            path.display(),
            s.target_mean,
            s.achieved_mean,
            s.param,
            if s.clamped {
                " (target unreachable: clamped)"
            } else {
                ""
            }
        );
    }
    Ok(())
}
