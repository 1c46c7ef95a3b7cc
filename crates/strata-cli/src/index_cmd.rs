//! `index create|list|drop`, `load`, `query` and `check`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Map, Value};
use strata::{Db, IndexSpec, IndexValue, KeyType, Predicate, QueryOptions};
use strata_harness::load;

use crate::{out, CliError};

#[derive(Subcommand, Debug)]
pub enum IndexCommand {
    /// Create a secondary index and build it over the existing data.
    Create {
        name: String,
        /// JSON field path of the attribute, e.g. `user_id` or `place.bbox`.
        #[arg(long, value_name = "PATH")]
        field: String,
        /// Attribute type.
        #[arg(long = "type", value_name = "TYPE", value_parser = ["i64", "f64", "string", "point", "rect"])]
        key_type: String,
        /// Index strategy: `next` (default; --param pin=SIZE keeps its
        /// secondary blocks in RAM up to SIZE, default 256MiB; true: all,
        /// false: none), `memory` (in-RAM B-tree /
        /// R-tree), `embedded` (per-block zone maps and Bloom filters),
        /// `composite` (secondary LSM tree; --param mode=sync|validation,
        /// validate=timestamp|direct), `deli`, `posting-eager`, `posting-lazy`,
        /// `filter` (per-table range filters; --param
        /// maintain=mutable-bitmap|validation|eager), `perseid` (PS-Tree in a
        /// page file, hybrid validation; --param page_cache_mb=N, default 0;
        /// --param merge_min_keys=N, default 4096).
        #[arg(long, default_value = strata::StrategyKind::Next.name())]
        strategy: String,
        /// Strategy parameter KEY=VALUE (repeatable), e.g. `delta=auto`
        /// (next) or `mode=validation` (composite).
        #[arg(long = "param", value_name = "KEY=VALUE")]
        params: Vec<String>,
    },
    /// List indexes with their state and statistics.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Drop an index.
    Drop { name: String },
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Csv,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// Input file: one JSON object per line (jsonl) or CSV with a header.
    pub file: PathBuf,
    /// Field holding the primary key (numbers are written in decimal).
    #[arg(long, value_name = "FIELD")]
    pub key_field: String,
    /// Input format (default: from the file extension, else jsonl).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Skip bad lines (counted and reported) instead of stopping at the
    /// first one.
    #[arg(long)]
    pub skip_bad: bool,
    /// Records per write batch.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: u64,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct QueryArgs {
    /// Index name.
    pub name: String,
    /// Records whose attribute equals V (spatial values as `x,y` or
    /// `xmin,ymin,xmax,ymax`).
    #[arg(long, value_name = "V", group = "pred", allow_hyphen_values = true)]
    pub eq: Option<String>,
    /// Records whose attribute lies in [LO, HI].
    #[arg(long, num_args = 2, value_names = ["LO", "HI"], group = "pred", allow_hyphen_values = true)]
    pub range: Option<Vec<String>>,
    /// Points inside, or rectangles intersecting, the window.
    #[arg(long, num_args = 4, value_names = ["X1", "Y1", "X2", "Y2"], group = "pred", allow_hyphen_values = true)]
    pub within: Option<Vec<f64>>,
    /// Only the K most recent matches.
    #[arg(long, value_name = "K")]
    pub limit: Option<usize>,
    /// Print keys only.
    #[arg(long)]
    pub keys_only: bool,
}

pub fn run_index(db: &Db, cmd: IndexCommand) -> Result<(), CliError> {
    match cmd {
        IndexCommand::Create {
            name,
            field,
            key_type,
            strategy,
            params,
        } => {
            let mut spec =
                IndexSpec::field(&name, &field, KeyType::parse(&key_type)?).strategy(&strategy);
            for p in params {
                let (k, v) = p
                    .split_once('=')
                    .ok_or_else(|| CliError::Other(format!("--param {p:?} is not KEY=VALUE")))?;
                spec = spec.param(k, v);
            }
            let t = Instant::now();
            create_with_progress(db, spec)?;
            out(format_args!(
                "created index {name} in {:.2} s\n",
                t.elapsed().as_secs_f64()
            ))?;
        }
        IndexCommand::List { json } => {
            let infos = db.indexes();
            if json {
                let s = serde_json::to_string_pretty(&infos)
                    .map_err(|e| CliError::Other(e.to_string()))?;
                out(format_args!("{s}\n"))?;
            } else {
                out(format_args!(
                    "{:<16} {:<24} {:<7} {:<13} {:<9} {:>12} {:>12} {:>12} {:>11} {:>9} {:>9}\n",
                    "name",
                    "field",
                    "type",
                    "strategy",
                    "state",
                    "entries",
                    "memory B",
                    "disk B",
                    "validations",
                    "stale",
                    "repaired"
                ))?;
                for i in infos {
                    let state = match (i.state, i.stats.build) {
                        (strata::IndexState::Building, Some(p)) => format!(
                            "building {}/{} tables, {:.0}% of bytes",
                            p.tables_done,
                            p.tables_total,
                            100.0 * p.bytes_done as f64 / p.bytes_total.max(1) as f64
                        ),
                        (s, _) => format!("{s:?}").to_lowercase(),
                    };
                    let field = match &i.spec.extractor {
                        strata::Extractor::Field(p) => p.clone(),
                        strata::Extractor::Custom(n) => format!("fn:{n}"),
                    };
                    out(format_args!(
                        "{:<16} {:<24} {:<7} {:<13} {:<9} {:>12} {:>12} {:>12} {:>11} {:>9} {:>9}\n",
                        i.spec.name,
                        field,
                        i.spec.key_type.as_str(),
                        i.spec.strategy,
                        state,
                        i.stats.global_entries,
                        i.stats.memory_bytes,
                        i.stats.disk_bytes,
                        i.stats.validations,
                        i.stats.validations_failed,
                        i.stats.repaired
                    ))?;
                    if let Some(p) = &i.stats.page_cache {
                        out(format_args!(
                            "  pages: {} bytes in RAM (clean budget {}), {} checked in the \
                             page file, {} accesses without a check, {} evicted\n",
                            p.resident_bytes, p.budget_bytes, p.misses, p.hits, p.evictions
                        ))?;
                    }
                    if let Some(why) = &i.stats.rebuilt_at_open {
                        out(format_args!(
                            "  warning: rebuilt from the data at open: {why}\n"
                        ))?;
                    }
                }
            }
        }
        IndexCommand::Drop { name } => {
            db.drop_index(&name)?;
            out(format_args!("dropped index {name}\n"))?;
        }
    }
    Ok(())
}

/// Creates an index, drawing the progress of its online build (bytes of
/// the tables covered) on stderr while it runs.
fn create_with_progress(db: &Db, spec: IndexSpec) -> Result<(), CliError> {
    let name = spec.name.clone();
    std::thread::scope(|s| {
        let build = s.spawn(|| db.create_index(spec));
        let mut bar: Option<strata_harness::progress::Progress> = None;
        while !build.is_finished() {
            let info = db.indexes().into_iter().find(|i| i.spec.name == name);
            if let Some(p) = info.and_then(|i| i.stats.build) {
                let bar = bar.get_or_insert_with(|| {
                    strata_harness::progress::Progress::bytes(
                        format!("building {name}"),
                        p.bytes_total,
                    )
                });
                bar.set_total(p.bytes_total);
                bar.tick(p.bytes_done);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if let Some(b) = bar.as_mut() {
            b.finish();
        }
        match build.join() {
            Ok(r) => r.map_err(CliError::from),
            Err(_) => Err(CliError::Other(format!(
                "the build of index {name} panicked"
            ))),
        }
    })
}

pub fn run_load(db: &Db, args: &LoadArgs) -> Result<(), CliError> {
    let cfg = load::LoadConfig {
        file: args.file.clone(),
        key_field: args.key_field.clone(),
        format: args.format.map(|f| match f {
            Format::Jsonl => load::Format::Jsonl,
            Format::Csv => load::Format::Csv,
        }),
        skip_bad: args.skip_bad,
        batch: args.batch,
    };
    let r = load::load(db, &cfg, &mut |m| eprintln!("{m}"))?;
    out(format_args!(
        "loaded {} records, {} bytes in {:.2} s ({:.0} records/s){}\n",
        r.records,
        r.bytes,
        r.seconds,
        r.records as f64 / r.seconds.max(1e-9),
        if r.skipped > 0 {
            format!(", skipped {} bad lines", r.skipped)
        } else {
            String::new()
        }
    ))
}

fn value_json(v: &[u8]) -> Value {
    serde_json::from_slice(v)
        .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(v).into_owned()))
}

pub fn run_query(db: &Db, q: &QueryArgs) -> Result<(), CliError> {
    let info = db
        .indexes()
        .into_iter()
        .find(|i| i.spec.name == q.name)
        .ok_or_else(|| CliError::Other(format!("no index named {:?}", q.name)))?;
    let ty = info.spec.key_type;
    let pred = if let Some(v) = &q.eq {
        Predicate::Eq(IndexValue::parse(ty, v)?)
    } else if let Some(r) = &q.range {
        Predicate::Range(IndexValue::parse(ty, &r[0])?, IndexValue::parse(ty, &r[1])?)
    } else if let Some(w) = &q.within {
        Predicate::Within([w[0], w[1], w[2], w[3]])
    } else {
        return Err(CliError::Other(
            "give one of --eq, --range or --within".into(),
        ));
    };
    let opts = QueryOptions {
        limit: q.limit,
        keys_only: q.keys_only,
        ..QueryOptions::default()
    };
    let hits = db.query(&q.name, &pred, opts)?;
    let mut o = std::io::BufWriter::new(std::io::stdout().lock());
    for h in &hits {
        let mut m = Map::new();
        m.insert(
            "key".into(),
            Value::from(String::from_utf8_lossy(h.key).into_owned()),
        );
        if let Some(v) = h.value {
            m.insert("value".into(), value_json(v));
        }
        writeln!(o, "{}", Value::Object(m)).map_err(crate::io_out)?;
    }
    o.flush().map_err(crate::io_out)
}

pub fn run_check(db: &Db) -> Result<(), CliError> {
    let mut bad = Vec::new();
    for i in db.indexes() {
        let c = db.check_index(&i.spec.name)?;
        out(format_args!(
            "{}: expected {}, found {}, missing {}, wrong {}: {}\n",
            c.index,
            c.expected,
            c.found,
            c.missing.len(),
            c.extra.len(),
            if c.ok() { "ok" } else { "MISMATCH" }
        ))?;
        if let Some(why) = &i.stats.rebuilt_at_open {
            out(format_args!(
                "  warning: rebuilt from the data at open (exact now): {why}\n"
            ))?;
        }
        if !c.ok() {
            for k in c.missing.iter().take(10) {
                out(format_args!("  missing {k}\n"))?;
            }
            for k in c.extra.iter().take(10) {
                out(format_args!("  wrong   {k}\n"))?;
            }
            bad.push(c.index);
        }
    }
    if bad.is_empty() {
        Ok(())
    } else {
        Err(CliError::Failed(format!(
            "index check failed for: {}",
            bad.join(", ")
        )))
    }
}

/// Opens `dir` for an index command (the database must exist).
pub fn open(dir: &Path) -> Result<Db, CliError> {
    crate::open_existing(dir)
}
