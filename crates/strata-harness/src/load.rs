//! `strata load`: bulk-load JSONL or CSV records into a database (a later
//! record is newer).
//!
//! JSONL: one JSON object per line; blank lines are skipped; each record is
//! stored exactly as written (so numbers beyond 64 bits are never rounded);
//! a line that is not UTF-8 is a bad record. CSV: RFC 4180 through the
//! `csv` crate, a header row first (a column named twice is refused);
//! quoted fields may hold commas, doubled quotes and line breaks; cells
//! that parse as 64-bit integers or finite floats become JSON numbers
//! (longer integers stay text). Each record is stored under the text of its
//! `key_field` (numbers in decimal). A bad record stops the load
//! (everything before it is written) unless `skip_bad`.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Map, Value};
use strata::{Db, WriteBatch, WriteOptions};

use crate::progress::Progress;
use crate::Error;

/// Input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    Jsonl,
    /// RFC 4180 CSV with a header row.
    Csv,
}

impl Format {
    /// `Csv` for a `.csv` file (any case), else `Jsonl`.
    pub fn of_path(path: &Path) -> Format {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
        {
            Format::Csv
        } else {
            Format::Jsonl
        }
    }
}

/// What to load, and how.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The input file.
    pub file: PathBuf,
    /// Field holding the primary key.
    pub key_field: String,
    /// Default: from the file extension ([`Format::of_path`]).
    pub format: Option<Format>,
    /// Skip bad records (counted) instead of stopping at the first.
    pub skip_bad: bool,
    /// Records per write batch (at least 1).
    pub batch: u64,
}

/// What a load did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Loaded {
    /// Records written.
    pub records: u64,
    /// Bytes of keys and values written.
    pub bytes: u64,
    /// Bad records skipped (`skip_bad`).
    pub skipped: u64,
    /// Wall time of the load, including the final flush, in seconds.
    pub seconds: f64,
}

/// A CSV cell as JSON: 64-bit integers and finite floats become numbers;
/// an integer that does not fit 64 bits stays text (as a float it would be
/// silently rounded).
pub fn csv_value(s: &str) -> Value {
    if let Ok(i) = s.parse::<i64>() {
        return Value::from(i);
    }
    if let Ok(u) = s.parse::<u64>() {
        return Value::from(u);
    }
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
        return Value::from(s);
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

/// A record: its fields, and for JSONL the line as written (stored as is).
struct Record {
    obj: Map<String, Value>,
    raw: Option<String>,
}

/// One JSONL line (without its line break) as a record.
fn jsonl_record(line: Vec<u8>) -> Result<Record, String> {
    let line = String::from_utf8(line).map_err(|_| "not UTF-8 text".to_string())?;
    match serde_json::from_str::<Value>(&line) {
        Ok(Value::Object(obj)) => Ok(Record {
            obj,
            raw: Some(line.trim().to_string()),
        }),
        Ok(_) => Err("not a JSON object".into()),
        Err(e) => Err(format!("bad JSON: {e}")),
    }
}

/// Refuses a CSV header that names a column twice (a record would keep
/// only one of the two values).
fn csv_header(rec: &csv::StringRecord) -> Result<Vec<String>, String> {
    let mut seen = HashSet::new();
    for name in rec.iter() {
        if !seen.insert(name) {
            return Err(format!("header: column {name:?} appears twice"));
        }
    }
    Ok(rec.iter().map(str::to_string).collect())
}

/// One CSV record as an object keyed by the header.
fn csv_object(header: &[String], fields: &csv::StringRecord) -> Result<Record, String> {
    if fields.len() != header.len() {
        return Err(format!(
            "{} fields, the header has {}",
            fields.len(),
            header.len()
        ));
    }
    Ok(Record {
        obj: header
            .iter()
            .cloned()
            .zip(fields.iter().map(csv_value))
            .collect(),
        raw: None,
    })
}

/// (key, JSON bytes) of a record.
fn keyed(rec: Record, key_field: &str) -> Result<(String, Vec<u8>), String> {
    let key = rec
        .obj
        .get(key_field)
        .and_then(key_text)
        .ok_or_else(|| format!("no string or number field {key_field:?}"))?;
    let bytes = match rec.raw {
        Some(raw) => raw.into_bytes(),
        None => serde_json::to_vec(&Value::Object(rec.obj)).map_err(|e| e.to_string())?,
    };
    Ok((key, bytes))
}

/// A source of records: `Ok(None)` at the end; `Ok(Some((line, Err)))` for
/// a bad record (skippable); `Err` for a failure that stops the load.
type Next<'a> = Box<dyn FnMut() -> Result<Option<(u64, Result<Record, String>)>, Error> + 'a>;

/// Loads `cfg.file` into `db`. `warn` receives the first ten "skipping"
/// messages of a `skip_bad` load.
pub fn load(db: &Db, cfg: &LoadConfig, warn: &mut dyn FnMut(String)) -> Result<Loaded, Error> {
    let path = cfg.file.as_path();
    let format = cfg.format.unwrap_or_else(|| Format::of_path(path));
    let file =
        File::open(path).map_err(|e| Error::Other(format!("open {}: {e}", path.display())))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let reader = BufReader::with_capacity(1 << 20, file);
    let read_cell = std::cell::Cell::new(0u64);
    let read = &read_cell;
    let mut next: Next<'_> = match format {
        Format::Jsonl => {
            // Lines as bytes: text that is not UTF-8 is a bad record, not
            // a failure of the load.
            let mut lines = reader.split(b'\n').enumerate();
            Box::new(move || loop {
                let Some((i, line)) = lines.next() else {
                    return Ok(None);
                };
                let line_no = i as u64 + 1;
                let mut line = line.map_err(|e| {
                    Error::Other(format!("{}: line {line_no}: {e}", path.display()))
                })?;
                read.set(read.get() + line.len() as u64 + 1);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some((line_no, jsonl_record(line))));
            })
        }
        Format::Csv => {
            let mut rdr = csv::ReaderBuilder::new()
                .has_headers(false)
                .flexible(true)
                .from_reader(reader);
            let mut header: Option<Vec<String>> = None;
            let mut rec = csv::StringRecord::new();
            Box::new(move || loop {
                let got = rdr.read_record(&mut rec);
                read.set(rdr.position().byte());
                let line_no = rec.position().map_or(0, |p| p.line());
                match got {
                    Ok(false) => return Ok(None),
                    Ok(true) => {}
                    Err(e) if matches!(e.kind(), csv::ErrorKind::Io(_)) => {
                        return Err(Error::Other(format!("{}: {e}", path.display())))
                    }
                    Err(e) => {
                        let line_no = e.position().map_or(line_no, |p| p.line());
                        if header.is_none() {
                            return Err(Error::Other(format!("{}: header: {e}", path.display())));
                        }
                        return Ok(Some((line_no, Err(e.to_string()))));
                    }
                }
                // A line of spaces is a blank line, as in JSONL.
                if rec.len() == 1 && rec[0].trim().is_empty() {
                    continue;
                }
                match &header {
                    None => {
                        header = Some(
                            csv_header(&rec)
                                .map_err(|e| Error::Other(format!("{}: {e}", path.display())))?,
                        )
                    }
                    Some(h) => return Ok(Some((line_no, csv_object(h, &rec)))),
                }
            })
        }
    };

    let t = Instant::now();
    let mut bar = Progress::bytes("loading", total);
    let mut batch = WriteBatch::new();
    let (mut records, mut bytes, mut skipped) = (0u64, 0u64, 0u64);
    while let Some((line_no, obj)) = next()? {
        match obj.and_then(|o| keyed(o, &cfg.key_field)) {
            Ok((key, value)) => {
                bytes += (key.len() + value.len()) as u64;
                batch.put(key.as_bytes(), &value);
                records += 1;
            }
            Err(e) if cfg.skip_bad => {
                skipped += 1;
                if skipped <= 10 {
                    warn(format!("skipping {}: line {line_no}: {e}", path.display()));
                }
            }
            Err(e) => {
                // Everything before the bad record is written; it is not.
                db.write(std::mem::take(&mut batch), WriteOptions::default())?;
                return Err(Error::Other(format!(
                    "{}: line {line_no}: {e} ({records} records before it were loaded; use --skip-bad to skip bad lines)",
                    path.display()
                )));
            }
        }
        if batch.len() as u64 >= cfg.batch.max(1) {
            db.write(std::mem::take(&mut batch), WriteOptions::default())?;
        }
        bar.tick(read.get());
    }
    db.write(batch, WriteOptions::default())?;
    db.flush()?;
    bar.finish();
    Ok(Loaded {
        records,
        bytes,
        skipped,
        seconds: t.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata::Options;

    /// A database loaded from a file (the database drops before its
    /// directory).
    struct Case {
        db: Db,
        result: Result<Loaded, Error>,
        warnings: Vec<String>,
        _dir: tempfile::TempDir,
    }

    fn load_str(name: &str, text: &str, skip_bad: bool) -> Case {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join(name);
        std::fs::write(&f, text).unwrap();
        let db = Db::open(dir.path().join("db"), Options::small_for_tests()).unwrap();
        let mut warnings = Vec::new();
        let r = load(
            &db,
            &LoadConfig {
                file: f,
                key_field: "id".into(),
                format: None,
                skip_bad,
                batch: 2,
            },
            &mut |m| warnings.push(m),
        );
        Case {
            db,
            result: r,
            warnings,
            _dir: dir,
        }
    }

    fn value(db: &Db, key: &str) -> Value {
        serde_json::from_slice(&db.get(key.as_bytes()).unwrap().unwrap()).unwrap()
    }

    #[test]
    fn csv_cells() {
        assert_eq!(csv_value("12"), Value::from(12));
        assert_eq!(csv_value("-1.5"), Value::from(-1.5));
        assert_eq!(csv_value("x1"), Value::from("x1"));
        assert_eq!(csv_value(""), Value::from(""));
        assert_eq!(csv_value("inf"), Value::from("inf"));
    }

    #[test]
    fn csv_quoted_fields_with_newlines_load() {
        let text = "id,n,label\r\na,5,\"two\nlines, and \"\"quotes\"\"\"\n\nb,7,\"x\r\ny\"\nc,-1.5,plain\n";
        let c = load_str("p.csv", text, false);
        assert_eq!(c.result.as_ref().unwrap().records, 3);
        assert_eq!(
            value(&c.db, "a"),
            serde_json::json!({"id": "a", "n": 5, "label": "two\nlines, and \"quotes\""})
        );
        assert_eq!(value(&c.db, "b")["label"], "x\r\ny");
        assert_eq!(value(&c.db, "c")["n"], -1.5);
    }

    #[test]
    fn csv_bad_records_name_their_line() {
        // Record a spans lines 2-3; the short record is on line 4.
        let text = "id,n\na,\"1\n\"\nb\nc,3\n";
        let c = load_str("p.csv", text, false);
        let e = c.result.as_ref().unwrap_err().to_string();
        assert!(e.contains("line 4: 1 fields, the header has 2"), "{e}");
        assert!(e.contains("1 records before it"), "{e}");
        assert!(c.db.get(b"a").unwrap().is_some());
        assert!(c.db.get(b"c").unwrap().is_none());
        let c = load_str("p.csv", text, true);
        assert_eq!(c.result.as_ref().unwrap().skipped, 1);
        assert_eq!(c.warnings.len(), 1);
        assert!(c.db.get(b"c").unwrap().is_some());
    }

    /// Regressions (reliability issue, bad input): a 30-digit integer was
    /// stored as 1.2345678901234568e+29; a non-UTF-8 line stopped a
    /// `--skip-bad` load and lost the lines before it; a CSV header with a
    /// duplicate column silently dropped a value.
    #[test]
    fn bad_input_is_refused_or_kept_exact() {
        let big = "123456789012345678901234567890";
        let c = load_str("d.jsonl", &format!("{{\"id\": 1, \"n\": {big}}}\n"), false);
        c.result.as_ref().unwrap();
        let stored = c.db.get(b"1").unwrap().unwrap();
        assert!(String::from_utf8_lossy(&stored).contains(big), "{stored:?}");
        assert_eq!(csv_value(big), Value::from(big));
        assert_eq!(csv_value("18446744073709551615"), Value::from(u64::MAX));

        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("u.jsonl");
        std::fs::write(&f, b"{\"id\": 1}\n{\"id\": \"\xff\xfe\"}\n{\"id\": 3}\n").unwrap();
        for skip_bad in [true, false] {
            let db = Db::open(
                dir.path().join(format!("db{skip_bad}")),
                Options::small_for_tests(),
            )
            .unwrap();
            let cfg = LoadConfig {
                file: f.clone(),
                key_field: "id".into(),
                format: None,
                skip_bad,
                batch: 100,
            };
            let r = load(&db, &cfg, &mut |_| {});
            assert!(db.get(b"1").unwrap().is_some(), "lines before are loaded");
            if skip_bad {
                assert_eq!(r.unwrap().skipped, 1);
                assert!(db.get(b"3").unwrap().is_some());
            } else {
                let e = r.unwrap_err().to_string();
                assert!(e.contains("line 2: not UTF-8"), "{e}");
            }
        }

        let c = load_str("p.csv", "id,n,n\na,1,2\n", true);
        let e = c.result.as_ref().unwrap_err().to_string();
        assert!(e.contains("column \"n\" appears twice"), "{e}");
        assert!(c.db.get(b"a").unwrap().is_none());
    }

    #[test]
    fn jsonl_records() {
        let c = load_str("d.jsonl", "{\"id\": 7, \"x\": [1, 2]}\n\n[1]\n", true);
        let r = c.result.as_ref().unwrap();
        assert_eq!((r.records, r.skipped), (1, 1));
        assert_eq!(value(&c.db, "7")["x"][1], 2);
        let c = load_str("d.jsonl", "{\"x\": 1}\n", false);
        let e = c.result.as_ref().unwrap_err().to_string();
        assert!(
            e.contains("line 1: no string or number field \"id\""),
            "{e}"
        );
    }
}
