//! `strata gen`: write a generated data set as JSONL and, optionally, its
//! calibrated query sets (see the `strata-bench` crate for the models).
//!
//! Output is a pure function of the arguments: the same `--seed` and
//! `--records` always give byte-identical files.

use std::fs::File;
use std::io::{BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use strata_bench::gen::{self as g, Dist};
use strata_bench::queries::{self, QuerySet};

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
    #[arg(long, value_name = "S")]
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

/// Progress lines on stderr, only when it is a terminal.
struct Progress {
    on: bool,
    total: u64,
}

impl Progress {
    fn tick(&self, done: u64) {
        if self.on && (done.is_multiple_of(65_536) || done == self.total) {
            eprint!("\rgenerated {done}/{}", self.total);
            if done == self.total {
                eprintln!();
            }
        }
    }

    fn say(&self, msg: &str) {
        if self.on {
            eprintln!("{msg}");
        }
    }
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
    let progress = Progress {
        on: std::io::stderr().is_terminal(),
        total: args.records,
    };
    let file =
        File::create(&args.out).map_err(|e| format!("create {}: {e}", args.out.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let write_err = |e: std::io::Error| format!("write {}: {e}", args.out.display());
    let want_queries = args.queries.is_some();
    let cap = if want_queries {
        usize::try_from(args.records).unwrap_or(0)
    } else {
        0
    };
    let seed = args.seed;

    let sets: Vec<QuerySet> = match args.kind {
        Kind::Tweets => {
            let mut users = Vec::with_capacity(cap);
            let mut coords = Vec::with_capacity(cap);
            for (i, t) in g::tweets(seed, args.records).enumerate() {
                writeln!(out, "{}", t.to_json()).map_err(write_err)?;
                if want_queries {
                    users.push(t.user_id);
                    coords.push(t.coordinates);
                }
                progress.tick(i as u64 + 1);
            }
            finish(out, &args.out)?;
            if want_queries {
                progress.say("calibrating query sets");
                queries::tweet_query_sets_from(&users, &coords, args.query_count, seed)
            } else {
                Vec::new()
            }
        }
        Kind::Buildings => {
            let mut bboxes = Vec::with_capacity(cap);
            let mut perims = Vec::with_capacity(cap);
            for (i, b) in g::buildings(seed, args.records).enumerate() {
                writeln!(out, "{}", b.to_json()).map_err(write_err)?;
                if want_queries {
                    bboxes.push(b.bbox);
                    perims.push(b.perimeter);
                }
                progress.tick(i as u64 + 1);
            }
            finish(out, &args.out)?;
            if want_queries {
                progress.say("calibrating query sets");
                queries::building_query_sets_from(&bboxes, &perims, args.query_count, seed)
            } else {
                Vec::new()
            }
        }
        Kind::Synthetic => {
            let mut attrs = Vec::with_capacity(cap);
            for (i, r) in g::synthetic(seed, args.records, dist).enumerate() {
                writeln!(out, "{}", r.to_json()).map_err(write_err)?;
                if want_queries {
                    attrs.push(r.attr);
                }
                progress.tick(i as u64 + 1);
            }
            finish(out, &args.out)?;
            if want_queries {
                progress.say("calibrating query sets");
                queries::synthetic_query_sets_from(&attrs, args.query_count, seed)
            } else {
                Vec::new()
            }
        }
    };
    println!("wrote {} records to {}", args.records, args.out.display());

    if let Some(dir) = &args.queries {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        for s in &sets {
            let path = dir.join(s.file_name());
            let json =
                serde_json::to_string(s).map_err(|e| format!("encode {}: {e}", path.display()))?;
            std::fs::write(&path, json + "\n")
                .map_err(|e| format!("write {}: {e}", path.display()))?;
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
    }
    Ok(())
}

fn finish(mut out: BufWriter<File>, path: &Path) -> Result<(), String> {
    out.flush()
        .map_err(|e| format!("write {}: {e}", path.display()))?;
    Ok(())
}
