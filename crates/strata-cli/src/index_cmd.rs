//! `index create|list|drop`, `load`, `query` and `check`.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::{Map, Value};
use strata::{
    Db, IndexSpec, IndexValue, KeyType, Predicate, QueryOptions, WriteBatch, WriteOptions,
};

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
        /// Index strategy: `next` (default), `memory` (in-RAM B-tree /
        /// R-tree), `embedded` (per-block zone maps and Bloom filters),
        /// `composite` (secondary LSM tree; --param mode=sync|validation,
        /// validate=timestamp|direct), `deli`, `posting-eager`, `posting-lazy`.
        #[arg(long, default_value = "next")]
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
            db.create_index(spec)?;
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
                        format!("{:?}", i.state).to_lowercase(),
                        i.stats.global_entries,
                        i.stats.memory_bytes,
                        i.stats.disk_bytes,
                        i.stats.validations,
                        i.stats.validations_failed,
                        i.stats.repaired
                    ))?;
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

/// Splits one CSV line (RFC 4180 quoting within the line).
fn csv_fields(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    let mut was_quoted = false;
    while let Some(c) = chars.next() {
        match (quoted, c) {
            (true, '"') if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            (true, '"') => quoted = false,
            (true, c) => cur.push(c),
            (false, '"') if cur.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            (false, ',') => {
                fields.push(std::mem::take(&mut cur));
                was_quoted = false;
            }
            (false, c) => cur.push(c),
        }
    }
    if quoted {
        return Err("unterminated quoted field".into());
    }
    fields.push(cur);
    Ok(fields)
}

/// A CSV cell as JSON: integers and finite floats become numbers.
fn csv_value(s: &str) -> Value {
    if let Ok(i) = s.parse::<i64>() {
        return Value::from(i);
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && !s.is_empty() => Value::from(f),
        _ => Value::from(s),
    }
}

fn key_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Parses line `line_no` into (key, JSON value bytes).
fn parse_record(
    line: &str,
    format: Format,
    header: &[String],
    key_field: &str,
) -> Result<(String, Vec<u8>), String> {
    let obj: Map<String, Value> = match format {
        Format::Jsonl => match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("not a JSON object".into()),
            Err(e) => return Err(format!("bad JSON: {e}")),
        },
        Format::Csv => {
            let f = csv_fields(line)?;
            if f.len() != header.len() {
                return Err(format!(
                    "{} fields, the header has {}",
                    f.len(),
                    header.len()
                ));
            }
            header
                .iter()
                .cloned()
                .zip(f.iter().map(|s| csv_value(s)))
                .collect()
        }
    };
    let key = obj
        .get(key_field)
        .and_then(key_text)
        .ok_or_else(|| format!("no string or number field {key_field:?}"))?;
    let bytes = serde_json::to_vec(&Value::Object(obj)).map_err(|e| e.to_string())?;
    Ok((key, bytes))
}

pub fn run_load(db: &Db, args: &LoadArgs) -> Result<(), CliError> {
    let format = args.format.unwrap_or_else(|| {
        if args
            .file
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            Format::Csv
        } else {
            Format::Jsonl
        }
    });
    let file = File::open(&args.file)
        .map_err(|e| CliError::Other(format!("open {}: {e}", args.file.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let reader = BufReader::with_capacity(1 << 20, file);
    let progress = std::io::stderr().is_terminal();
    let t = Instant::now();
    let mut header: Vec<String> = Vec::new();
    let mut batch = WriteBatch::new();
    let (mut records, mut bytes, mut skipped, mut read) = (0u64, 0u64, 0u64, 0u64);
    let mut last_shown = Instant::now();
    for (i, line) in reader.lines().enumerate() {
        let line_no = i + 1;
        let line = line.map_err(|e| {
            CliError::Other(format!("{}: line {line_no}: {e}", args.file.display()))
        })?;
        read += line.len() as u64 + 1;
        if line.trim().is_empty() {
            continue;
        }
        if format == Format::Csv && header.is_empty() {
            header = csv_fields(&line)
                .map_err(|e| CliError::Other(format!("{}: header: {e}", args.file.display())))?;
            continue;
        }
        match parse_record(&line, format, &header, &args.key_field) {
            Ok((key, value)) => {
                bytes += (key.len() + value.len()) as u64;
                batch.put(key.as_bytes(), &value);
                records += 1;
            }
            Err(e) if args.skip_bad => {
                skipped += 1;
                if skipped <= 10 {
                    eprintln!("skipping {}: line {line_no}: {e}", args.file.display());
                }
            }
            Err(e) => {
                // Everything before the bad line is written; it is not.
                db.write(std::mem::take(&mut batch), WriteOptions::default())?;
                return Err(CliError::Other(format!(
                    "{}: line {line_no}: {e} ({records} records before it were loaded; use --skip-bad to skip bad lines)",
                    args.file.display()
                )));
            }
        }
        if batch.len() as u64 >= args.batch {
            db.write(std::mem::take(&mut batch), WriteOptions::default())?;
        }
        if progress && last_shown.elapsed().as_millis() > 200 {
            last_shown = Instant::now();
            let pct = if total > 0 {
                read as f64 * 100.0 / total as f64
            } else {
                0.0
            };
            eprint!("\rloading: {pct:5.1}%  {records} records");
            let _ = std::io::stderr().flush();
        }
    }
    db.write(batch, WriteOptions::default())?;
    db.flush()?;
    if progress {
        eprint!("\r\x1b[K");
    }
    let secs = t.elapsed().as_secs_f64();
    out(format_args!(
        "loaded {records} records, {bytes} bytes in {secs:.2} s ({:.0} records/s){}\n",
        records as f64 / secs.max(1e-9),
        if skipped > 0 {
            format!(", skipped {skipped} bad lines")
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
    };
    let hits = db.query(&q.name, &pred, opts)?;
    let mut o = std::io::BufWriter::new(std::io::stdout().lock());
    for h in hits {
        let mut m = Map::new();
        m.insert(
            "key".into(),
            Value::from(String::from_utf8_lossy(&h.key).into_owned()),
        );
        if let Some(v) = &h.value {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quoting() {
        assert_eq!(
            csv_fields(r#"a,"b,c","d""e",,f"#).unwrap(),
            vec!["a", "b,c", "d\"e", "", "f"]
        );
        assert!(csv_fields(r#"a,"b"#).is_err());
        assert_eq!(csv_value("12"), Value::from(12));
        assert_eq!(csv_value("-1.5"), Value::from(-1.5));
        assert_eq!(csv_value("x1"), Value::from("x1"));
        assert_eq!(csv_value(""), Value::from(""));
    }

    #[test]
    fn records_parse() {
        let (k, v) = parse_record(r#"{"id": 7, "x": [1, 2]}"#, Format::Jsonl, &[], "id").unwrap();
        assert_eq!(k, "7");
        assert_eq!(serde_json::from_slice::<Value>(&v).unwrap()["x"][1], 2);
        assert!(parse_record("[1]", Format::Jsonl, &[], "id").is_err());
        assert!(parse_record(r#"{"x": 1}"#, Format::Jsonl, &[], "id").is_err());
        let h = vec!["id".to_string(), "n".to_string()];
        let (k, v) = parse_record("a,5", Format::Csv, &h, "id").unwrap();
        assert_eq!(k, "a");
        assert_eq!(serde_json::from_slice::<Value>(&v).unwrap()["n"], 5);
        assert!(parse_record("a", Format::Csv, &h, "id").is_err());
    }
}
