//! `strata gen`: a generated data set written as JSONL and, optionally,
//! its calibrated query sets (the models are in `strata_bench::gen` and
//! `strata_bench::queries`).
//!
//! Output is a pure function of the configuration: the same seed and
//! record count always give byte-identical files.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use strata_bench::gen::{self as g, Dist};
use strata_bench::queries::{self, QuerySet};

use crate::progress::Progress;
use crate::Error;

/// Which data set to generate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Geo-tagged tweets (NEXT §6.1).
    Tweets,
    /// OSM-like building footprints.
    Buildings,
    /// Synthetic integer attribute `attr` in 1..=10^8 (NEXT §6.5).
    Synthetic,
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenConfig {
    /// Which data set.
    pub kind: Kind,
    /// Records to write (one JSONL line each).
    pub records: u64,
    /// Seed of the generator and the query sets.
    pub seed: u64,
    /// Distribution of `attr` (synthetic only; others take `Uniform`).
    pub dist: Dist,
    /// The JSONL file.
    pub out: PathBuf,
    /// Also write calibrated query sets as `DIR/<attribute>-<class>.json`.
    pub queries: Option<PathBuf>,
    /// Queries per query set.
    pub query_count: usize,
}

/// What was written.
#[derive(Debug)]
pub struct Generated {
    /// Records written to the JSONL file.
    pub records: u64,
    /// Each query set with the file it was written to.
    pub query_sets: Vec<(PathBuf, QuerySet)>,
}

/// Writes the data set (and query sets) of `cfg`.
pub fn generate(cfg: &GenConfig) -> Result<Generated, Error> {
    let path = cfg.out.as_path();
    let file =
        File::create(path).map_err(|e| Error::Other(format!("create {}: {e}", path.display())))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let write_err = |e: std::io::Error| Error::Other(format!("write {}: {e}", path.display()));
    let want_queries = cfg.queries.is_some();
    let cap = if want_queries {
        usize::try_from(cfg.records).unwrap_or(0)
    } else {
        0
    };
    let seed = cfg.seed;
    let mut bar = Progress::new("generated", cfg.records);
    let calibrating = |bar: &mut Progress| {
        bar.finish();
        Progress::note("calibrating query sets");
    };

    let sets: Vec<QuerySet> = match cfg.kind {
        Kind::Tweets => {
            let mut users = Vec::with_capacity(cap);
            let mut coords = Vec::with_capacity(cap);
            for (i, t) in g::tweets(seed, cfg.records).enumerate() {
                writeln!(out, "{}", t.to_json()).map_err(write_err)?;
                if want_queries {
                    users.push(t.user_id);
                    coords.push(t.coordinates);
                }
                bar.tick(i as u64 + 1);
            }
            finish(out, path)?;
            if want_queries {
                calibrating(&mut bar);
                queries::tweet_query_sets_from(&users, &coords, cfg.query_count, seed)
            } else {
                Vec::new()
            }
        }
        Kind::Buildings => {
            let mut bboxes = Vec::with_capacity(cap);
            let mut perims = Vec::with_capacity(cap);
            for (i, b) in g::buildings(seed, cfg.records).enumerate() {
                writeln!(out, "{}", b.to_json()).map_err(write_err)?;
                if want_queries {
                    bboxes.push(b.bbox);
                    perims.push(b.perimeter);
                }
                bar.tick(i as u64 + 1);
            }
            finish(out, path)?;
            if want_queries {
                calibrating(&mut bar);
                queries::building_query_sets_from(&bboxes, &perims, cfg.query_count, seed)
            } else {
                Vec::new()
            }
        }
        Kind::Synthetic => {
            let mut attrs = Vec::with_capacity(cap);
            for (i, r) in g::synthetic(seed, cfg.records, cfg.dist).enumerate() {
                writeln!(out, "{}", r.to_json()).map_err(write_err)?;
                if want_queries {
                    attrs.push(r.attr);
                }
                bar.tick(i as u64 + 1);
            }
            finish(out, path)?;
            if want_queries {
                calibrating(&mut bar);
                queries::synthetic_query_sets_from(&attrs, cfg.query_count, seed)
            } else {
                Vec::new()
            }
        }
    };
    bar.finish();

    let mut query_sets = Vec::new();
    if let Some(dir) = &cfg.queries {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Other(format!("create {}: {e}", dir.display())))?;
        for s in sets {
            let p = dir.join(s.file_name());
            let json = serde_json::to_string(&s)
                .map_err(|e| Error::Other(format!("encode {}: {e}", p.display())))?;
            std::fs::write(&p, json + "\n")
                .map_err(|e| Error::Other(format!("write {}: {e}", p.display())))?;
            query_sets.push((p, s));
        }
    }
    Ok(Generated {
        records: cfg.records,
        query_sets,
    })
}

fn finish(mut out: BufWriter<File>, path: &Path) -> Result<(), Error> {
    out.flush()
        .map_err(|e| Error::Other(format!("write {}: {e}", path.display())))
}
