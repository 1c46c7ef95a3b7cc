//! Bulk loading of JSONL or CSV files into a database (a later record is
//! newer): what `strata load` and the Python package's `Db.load` run.
//!
//! JSONL: one JSON object per line; blank lines are skipped; each record is
//! stored exactly as written (so numbers beyond 64 bits are never rounded);
//! a line that is not UTF-8 is a bad record. CSV: RFC 4180 through the
//! `csv` crate, a header row first (a column named twice is refused);
//! quoted fields may hold commas, doubled quotes and line breaks; cells
//! that parse as 64-bit integers or finite floats become JSON numbers
//! (longer integers stay text). Each record is stored under the text of its
//! key field (numbers in decimal). A bad record stops the load (everything
//! before it is written) unless [`LoadOptions::skip_bad`]. The load ends
//! with a flush, so the records are durable when it returns.

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::index::def::Read;
use crate::index::fields::Fields;
use crate::{Db, Error, Result, WriteBatch, WriteOptions};

/// Input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

    /// The format named `name` (`jsonl` or `csv`); a clear error otherwise.
    pub fn parse(name: &str) -> Result<Format> {
        match name {
            "jsonl" => Ok(Format::Jsonl),
            "csv" => Ok(Format::Csv),
            _ => Err(Error::invalid(format!(
                "unknown input format {name:?} (available: jsonl, csv)"
            ))),
        }
    }
}

/// How to load. `LoadOptions::new(key_field)` gives the defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoadOptions {
    /// Field holding the primary key (a string or a number).
    pub key_field: String,
    /// `None` (the default): from the file extension ([`Format::of_path`]).
    pub format: Option<Format>,
    /// Skip bad records (counted, reported as [`LoadEvent::Skipped`])
    /// instead of stopping at the first. Default false.
    pub skip_bad: bool,
    /// Records per write batch (at least 1; default 1,000).
    pub batch: usize,
}

impl LoadOptions {
    /// The defaults, with the key in `key_field`.
    pub fn new(key_field: impl Into<String>) -> LoadOptions {
        LoadOptions {
            key_field: key_field.into(),
            format: None,
            skip_bad: false,
            batch: 1000,
        }
    }

    /// Sets [`LoadOptions::format`].
    pub fn format(mut self, format: Format) -> LoadOptions {
        self.format = Some(format);
        self
    }

    /// Sets [`LoadOptions::skip_bad`].
    pub fn skip_bad(mut self, skip: bool) -> LoadOptions {
        self.skip_bad = skip;
        self
    }

    /// Sets [`LoadOptions::batch`].
    pub fn batch(mut self, records: usize) -> LoadOptions {
        self.batch = records;
        self
    }
}

/// What a load reports while it runs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LoadEvent {
    /// `read` of the file's `total` bytes have been read.
    Progress {
        /// Bytes read so far.
        read: u64,
        /// Size of the file.
        total: u64,
    },
    /// A bad record was skipped ([`LoadOptions::skip_bad`]): file, line and
    /// why.
    Skipped(String),
}

/// What a load did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Loaded {
    /// Records written.
    pub records: u64,
    /// Bytes of keys and values written.
    pub bytes: u64,
    /// Bad records skipped ([`LoadOptions::skip_bad`]).
    pub skipped: u64,
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

/// A record: its fields (CSV), or its key and the line as written, stored
/// as is (JSONL).
enum Record {
    Fields(Map<String, Value>),
    /// `read`: the line's reading for the key and the indexed paths,
    /// handed to the index maintenance (`index::preread`).
    Line {
        key: String,
        raw: String,
        read: Read,
    },
}

/// One JSONL line (without its line break) as a record keyed by the field
/// of path `key_path` in `key` (which may read other paths too: the
/// indexed ones). The line is read once by the targeted reader
/// (`index::fields`), which accepts exactly the documents a full parse
/// accepts; a bad line is parsed again, only to say why.
fn jsonl_record(
    line: Vec<u8>,
    key: &Fields,
    key_path: &[String],
    key_field: &str,
) -> std::result::Result<Record, String> {
    let line = String::from_utf8(line).map_err(|_| "not UTF-8 text".to_string())?;
    let raw = line.trim();
    let Ok(got) = key.extract(raw.as_bytes()) else {
        return Err(match serde_json::from_str::<Value>(raw) {
            Err(e) => format!("bad JSON: {e}"),
            Ok(_) => "bad JSON".to_string(),
        });
    };
    if !raw.starts_with('{') {
        return Err("not a JSON object".into());
    }
    let key = key
        .slot(key_path)
        .and_then(|s| got.key_text(s))
        .ok_or_else(|| format!("no string or number field {key_field:?}"))?;
    Ok(Record::Line {
        key,
        raw: raw.to_string(),
        read: Ok(got),
    })
}

/// Refuses a CSV header that names a column twice (a record would keep
/// only one of the two values).
fn csv_header(rec: &csv::StringRecord) -> std::result::Result<Vec<String>, String> {
    let mut seen = HashSet::new();
    for name in rec.iter() {
        if !seen.insert(name) {
            return Err(format!("header: column {name:?} appears twice"));
        }
    }
    Ok(rec.iter().map(str::to_string).collect())
}

/// One CSV record as an object keyed by the header.
fn csv_object(
    header: &[String],
    fields: &csv::StringRecord,
) -> std::result::Result<Record, String> {
    if fields.len() != header.len() {
        return Err(format!(
            "{} fields, the header has {}",
            fields.len(),
            header.len()
        ));
    }
    Ok(Record::Fields(
        header
            .iter()
            .cloned()
            .zip(fields.iter().map(csv_value))
            .collect(),
    ))
}

/// (key, JSON bytes, the bytes' reading if the loader made one) of a
/// record.
type Keyed = (String, Vec<u8>, Option<Read>);

fn keyed(rec: Record, key_field: &str) -> std::result::Result<Keyed, String> {
    match rec {
        Record::Line { key, raw, read } => Ok((key, raw.into_bytes(), Some(read))),
        Record::Fields(obj) => {
            let key = obj
                .get(key_field)
                .and_then(key_text)
                .ok_or_else(|| format!("no string or number field {key_field:?}"))?;
            let bytes = serde_json::to_vec(&Value::Object(obj)).map_err(|e| e.to_string())?;
            Ok((key, bytes, None))
        }
    }
}

/// A source of records: `Ok(None)` at the end; `Ok(Some((line, Err)))` for
/// a bad record (skippable); `Err` for a failure that stops the load.
type Next<'a> = Box<dyn FnMut() -> Result<Option<(u64, std::result::Result<Record, String>)>> + 'a>;

/// Loads the file at `path` into `db` (see the module documentation);
/// `events` receives progress and skipped records. A bad record (without
/// `skip_bad`) is an [`Error::InvalidArgument`] naming the file and line;
/// the records before it are written.
pub fn load_file(
    db: &Db,
    path: &Path,
    opts: &LoadOptions,
    events: &mut dyn FnMut(LoadEvent),
) -> Result<Loaded> {
    let format = opts.format.unwrap_or_else(|| Format::of_path(path));
    let file = File::open(path).map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    let total = file.metadata().map(|m| m.len()).unwrap_or(0);
    let reader = BufReader::with_capacity(1 << 20, file);
    let read_cell = std::cell::Cell::new(0u64);
    let read = &read_cell;
    // The key field is a top-level name, dots and all. One reading of each
    // JSONL line for its key and for the indexes' paths, which the index
    // maintenance takes instead of reading the record again
    // (`index::preread`).
    let key_path = [opts.key_field.clone()];
    let index_paths = db.index_manager().json_paths();
    let line_reader = Arc::new(Fields::new(
        std::iter::once(key_path.as_slice()).chain(index_paths.iter().map(Vec::as_slice)),
    ));
    let pre_read = !index_paths.is_empty();
    let mut next: Next<'_> = match format {
        Format::Jsonl => {
            // Lines as bytes: text that is not UTF-8 is a bad record, not
            // a failure of the load.
            let mut lines = reader.split(b'\n').enumerate();
            let (key_path, line_reader) = (&key_path, &line_reader);
            Box::new(move || loop {
                let Some((i, line)) = lines.next() else {
                    return Ok(None);
                };
                let line_no = i as u64 + 1;
                let mut line =
                    line.map_err(|e| Error::io(format!("{}: line {line_no}", path.display()), e))?;
                read.set(read.get() + line.len() as u64 + 1);
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Ok(Some((
                    line_no,
                    jsonl_record(line, line_reader, key_path, &opts.key_field),
                )));
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
                        return Err(Error::invalid(format!("{}: {e}", path.display())))
                    }
                    Err(e) => {
                        let line_no = e.position().map_or(line_no, |p| p.line());
                        if header.is_none() {
                            return Err(Error::invalid(format!("{}: header: {e}", path.display())));
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
                                .map_err(|e| Error::invalid(format!("{}: {e}", path.display())))?,
                        )
                    }
                    Some(h) => return Ok(Some((line_no, csv_object(h, &rec)))),
                }
            })
        }
    };

    let mut batch = WriteBatch::new();
    // The batch's records' readings, in batch order.
    let mut reads: Vec<(Vec<u8>, Read)> = Vec::new();
    // Writes `batch`, leaving in its place an empty one sized like it, and
    // `reads` empty with its capacity (no regrowth from empty per batch).
    let write = |batch: &mut WriteBatch, reads: &mut Vec<(Vec<u8>, Read)>| -> Result<()> {
        let full = std::mem::replace(batch, WriteBatch::with_capacity(batch.encoded_len()));
        let _registered = (!reads.is_empty()).then(|| {
            let cap = reads.len();
            db.index_manager().pre_reads().register(
                line_reader.clone(),
                std::mem::replace(reads, Vec::with_capacity(cap)),
            )
        });
        db.write(full, WriteOptions::default())
    };
    let (mut records, mut bytes, mut skipped) = (0u64, 0u64, 0u64);
    while let Some((line_no, obj)) = next()? {
        match obj.and_then(|o| keyed(o, &opts.key_field)) {
            Ok((key, value, read)) => {
                bytes += (key.len() + value.len()) as u64;
                batch.put(key.as_bytes(), &value);
                if let (true, Some(r)) = (pre_read, read) {
                    reads.push((value, r));
                }
                records += 1;
            }
            Err(e) if opts.skip_bad => {
                skipped += 1;
                events(LoadEvent::Skipped(format!(
                    "{}: line {line_no}: {e}",
                    path.display()
                )));
            }
            Err(e) => {
                // Everything before the bad record is written; it is not.
                write(&mut batch, &mut reads)?;
                return Err(Error::invalid(format!(
                    "{}: line {line_no}: {e} ({records} records before it were loaded)",
                    path.display()
                )));
            }
        }
        if batch.len() as u64 >= opts.batch.max(1) as u64 {
            write(&mut batch, &mut reads)?;
        }
        events(LoadEvent::Progress {
            read: read.get(),
            total,
        });
    }
    write(&mut batch, &mut reads)?;
    db.flush()?;
    Ok(Loaded {
        records,
        bytes,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key the targeted reader takes from a line is the one a full
    /// parse gives (`key_text` of the parsed object), and a line is bad
    /// exactly when the full parse says so.
    #[test]
    fn jsonl_keys_match_a_full_parse() {
        let key_path = ["id".to_string()];
        let reader = Fields::new([key_path.as_slice()]);
        for line in [
            r#"{"id": "abc", "x": 1}"#,
            r#"{"id": 12, "id": "last wins"}"#,
            r#"{"id": -5}"#,
            r#"{"id": 18446744073709551615}"#,
            r#"{"id": 123456789012345678901234567890}"#,
            r#"{"id": 1.0}"#,
            r#"{"id": 1.5e3}"#,
            r#"{"id": -0}"#,
            r#"{"id": "caf\u00e9 \"q\""}"#,
            r#"  {"x": {"id": 1}, "id": 2}  "#,
            r#"{"id": null}"#,
            r#"{"id": [1]}"#,
            r#"{"id": {"a": 1}}"#,
            r#"{"x": 1}"#,
            r#"[{"id": 1}]"#,
            r#""id""#,
            r#"{"id": 1,}"#,
            r#"{"id": 1} x"#,
            r#"{"id": 01}"#,
        ] {
            let full = match serde_json::from_str::<Value>(line) {
                Ok(Value::Object(obj)) => obj
                    .get("id")
                    .and_then(key_text)
                    .ok_or_else(|| "no string or number field \"id\"".to_string()),
                Ok(_) => Err("not a JSON object".to_string()),
                Err(e) => Err(format!("bad JSON: {e}")),
            };
            let got = jsonl_record(line.as_bytes().to_vec(), &reader, &["id".to_string()], "id")
                .and_then(|r| match r {
                    Record::Line { key, raw, .. } => {
                        assert_eq!(raw, line.trim());
                        Ok(key)
                    }
                    Record::Fields(_) => Err("a JSONL line read as fields".to_string()),
                });
            assert_eq!(got, full, "{line}");
        }
    }
}
