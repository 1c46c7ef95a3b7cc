//! `strata sst FILE`, `strata manifest DIR`, `strata wal FILE`: what is
//! inside a database's files, read directly (no database is opened, so
//! they also work on a copy, or beside a running process).
//!
//! Each prints text, or with `--json` JSON (`sst`: one object; `manifest`
//! and `wal`: one object a line). Keys print as text when they are UTF-8
//! (quoted in text output), else as `0x` hex.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};
use strata::lsm::batch::BatchOp;
use strata::lsm::filename::{self, FileKind};
use strata::lsm::key::{parse_internal_key, ValueKind};
use strata::lsm::sstable::{Table, TableReadOptions};
use strata::lsm::version::VersionEdit;
use strata::lsm::wal::LogReader;
use strata::{IndexValue, WalRecovery, WriteBatch};

use crate::{out, CliError};

/// Bytes as text: UTF-8 shown as is (escaped like a Rust string), other
/// bytes as `0x` hex.
fn show(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => format!("{s:?}"),
        Err(_) => {
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            format!("0x{hex}")
        }
    }
}

/// Bytes as a JSON string: the text if UTF-8, else `0x` hex.
fn show_json(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) => s.to_string(),
        Err(_) => show(b),
    }
}

fn kind_name(k: ValueKind) -> &'static str {
    match k {
        ValueKind::Value => "put",
        ValueKind::Deletion => "del",
        ValueKind::Merge => "merge",
    }
}

/// An internal key as (user key, seq, kind) JSON, or its raw bytes if it
/// does not parse.
fn ikey_json(ikey: &[u8]) -> Value {
    match parse_internal_key(ikey) {
        Ok(p) => json!({"key": show_json(p.user_key), "seq": p.seq, "kind": kind_name(p.kind)}),
        Err(_) => json!({"raw": show_json(ikey)}),
    }
}

fn ikey_text(ikey: &[u8]) -> String {
    match parse_internal_key(ikey) {
        Ok(p) => format!("{}@{}", show(p.user_key), p.seq),
        Err(_) => format!("raw {}", show(ikey)),
    }
}

/// What a named meta block holds, from its name (`docs/format/`).
fn meta_holds(name: &str) -> String {
    if name == "next.memo" {
        return "NEXT update memo: (key, seq, superseding seq) of versions this table obsoletes"
            .into();
    }
    let mut parts = name.split('.');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("next"), Some(id), Some("dir"), None) => {
            format!("NEXT directory of index {id}: its secondary blocks and their value ranges")
        }
        (Some("next"), Some(id), Some("vf"), None) => {
            format!(
                "NEXT value filter of index {id}: Bloom filter over the table's distinct values"
            )
        }
        (Some("next"), Some(id), Some("sketch"), None) => {
            format!("NEXT sketch of index {id}: each spatial slice's entries on a 256x256 grid")
        }
        (Some("next"), Some(id), Some("cells"), None) => {
            format!("NEXT cells of index {id} (written on 2026-11-27 only; ignored since)")
        }
        (Some("next"), Some(id), Some(n), None) => {
            format!("NEXT secondary index block {n} of index {id}: attribute values -> data blocks")
        }
        (Some("embedded"), Some(id), None, None) => format!(
            "Embedded index {id}: per-data-block zone maps (min/max value) and Bloom filters"
        ),
        _ => "extension block".into(),
    }
}

fn value_json(v: &IndexValue) -> Value {
    match v {
        IndexValue::I64(x) => json!(x),
        IndexValue::F64(x) => json!(x),
        IndexValue::Str(x) => json!(x),
        IndexValue::Point(p) => json!(p),
        IndexValue::Rect(r) => json!(r),
    }
}

/// The decoded NEXT directory of meta block `name`, if it is one.
fn next_dir(table: &Table, name: &str) -> Option<Result<strata::inspect::NextDirectory, CliError>> {
    if !(name.starts_with("next.") && name.ends_with(".dir")) {
        return None;
    }
    Some(match table.meta_block(name) {
        Ok(Some(b)) => strata::inspect::next_directory(&b).map_err(CliError::Db),
        Ok(None) => Err(CliError::Other(format!("meta block {name} vanished"))),
        Err(e) => Err(CliError::Db(e)),
    })
}

/// The decoded Embedded index block of meta block `name`, if it is one.
fn embedded_zones(
    table: &Table,
    name: &str,
) -> Option<Result<strata::inspect::EmbeddedZones, CliError>> {
    let mut parts = name.split('.');
    if !(parts.next() == Some("embedded") && parts.next().is_some() && parts.next().is_none()) {
        return None;
    }
    Some(match table.meta_block(name) {
        Ok(Some(b)) => strata::inspect::embedded_zones(&b).map_err(CliError::Db),
        Ok(None) => Err(CliError::Other(format!("meta block {name} vanished"))),
        Err(e) => Err(CliError::Db(e)),
    })
}

fn zones_json(z: &strata::inspect::EmbeddedZones) -> Value {
    json!({
        "type": z.key_type.as_str(),
        "indexed_values": z.values,
        "zone": z.zone.as_ref().map(|(lo, hi)| json!({"lo": value_json(lo), "hi": value_json(hi)})),
        "blocks": z.blocks.iter().map(|b| json!({
            "offset": b.offset,
            "values": b.values,
            "lo": value_json(&b.zone.0),
            "hi": value_json(&b.zone.1),
            "filter_bytes": b.filter_bytes,
            "continues": b.continues,
        })).collect::<Vec<_>>(),
    })
}

/// Meta block names in natural order: `next.2.9` before `next.2.10`.
fn natural_key(name: &str) -> Vec<(String, u64)> {
    name.split('.')
        .map(|p| match p.parse::<u64>() {
            Ok(n) => (String::new(), n),
            Err(_) => (p.to_string(), 0),
        })
        .collect()
}

fn dir_json(d: &strata::inspect::NextDirectory) -> Value {
    json!({
        "type": d.key_type.as_str(),
        "version": d.version,
        "indexed_data_blocks": d.data_blocks,
        "secondary_blocks": d.secondary_blocks,
        "ranges": d.ranges.iter().map(|(b, lo, hi)| json!({
            "secondary_block": b, "lo": value_json(lo), "hi": value_json(hi)
        })).collect::<Vec<_>>(),
    })
}

/// Ranges printed per directory in text output (all of them with --json).
const TEXT_RANGES: usize = 8;

/// The MANIFEST named by `dir/CURRENT`.
fn manifest_path(dir: &Path) -> Result<PathBuf, CliError> {
    let current = filename::current_file(dir);
    let name = std::fs::read_to_string(&current)
        .map_err(|e| CliError::Other(format!("read {}: {e}", current.display())))?;
    let name = name.trim_end_matches('\n');
    match filename::parse(name) {
        Some(FileKind::Manifest(_)) => Ok(dir.join(name)),
        _ => Err(CliError::Other(format!(
            "{} does not name a manifest: {name:?}",
            current.display()
        ))),
    }
}

/// The version edits of the MANIFEST of `dir`, in order.
fn read_edits(dir: &Path) -> Result<(PathBuf, Vec<VersionEdit>), CliError> {
    let path = manifest_path(dir)?;
    let file =
        File::open(&path).map_err(|e| CliError::Other(format!("open {}: {e}", path.display())))?;
    let mut reader = LogReader::new(file, path.clone(), WalRecovery::TolerateTornTail);
    let mut edits = Vec::new();
    while let Some(rec) = reader.read_record()? {
        edits.push(VersionEdit::decode(&rec)?);
    }
    Ok((path, edits))
}

/// The level of live table `number` after replaying `edits`.
fn live_level(edits: &[VersionEdit], number: u64) -> Option<usize> {
    let mut live: BTreeMap<u64, usize> = BTreeMap::new();
    for e in edits {
        for (_, n) in &e.deleted_files {
            live.remove(n);
        }
        for (level, f) in &e.new_files {
            live.insert(f.number, *level);
        }
    }
    live.get(&number).copied()
}

/// `strata sst FILE`.
pub fn run_sst(file: &Path, as_json: bool) -> Result<(), CliError> {
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let number = match filename::parse(name) {
        Some(FileKind::Table(n)) => n,
        _ => {
            return Err(CliError::Other(format!(
                "{} is not a table file (NNNNNN.sst)",
                file.display()
            )))
        }
    };
    let size = std::fs::metadata(file)
        .map_err(|e| CliError::Other(format!("stat {}: {e}", file.display())))?
        .len();
    let table = Arc::new(Table::open(
        file,
        number,
        size,
        TableReadOptions::uncached(),
    )?);
    let dir = file.parent().unwrap_or(Path::new("."));
    // The level, if the directory's MANIFEST lists the table as live.
    let level = read_edits(dir)
        .ok()
        .and_then(|(_, edits)| live_level(&edits, number));
    let p = table.properties();
    let handles = table.data_block_handles()?;
    type Meta = (
        String,
        u64,
        String,
        Option<strata::inspect::NextDirectory>,
        Option<strata::inspect::EmbeddedZones>,
    );
    let mut meta: Vec<Meta> = Vec::new();
    let mut names = table.meta_block_names();
    names.sort_by_cached_key(|n| natural_key(n));
    for n in names {
        let size = table.meta_block_size(&n).unwrap_or(0);
        let holds = meta_holds(&n);
        let dir = next_dir(&table, &n).transpose()?;
        let zones = embedded_zones(&table, &n).transpose()?;
        meta.push((n, size, holds, dir, zones));
    }
    // Index blocks an online build put in side files beside the table.
    for (side, blocks) in strata::inspect::side_file_blocks(dir, number, size)? {
        for (n, bytes) in blocks {
            let holds = format!("{} (side file {side})", meta_holds(&n));
            let d = (n.starts_with("next.") && n.ends_with(".dir"))
                .then(|| strata::inspect::next_directory(&bytes))
                .transpose()?;
            let z = n
                .starts_with("embedded.")
                .then(|| strata::inspect::embedded_zones(&bytes))
                .transpose()?;
            meta.push((n, bytes.len() as u64, holds, d, z));
        }
    }
    if as_json {
        let v = json!({
            "file": file.display().to_string(),
            "number": number,
            "bytes": size,
            "level": level,
            "entries": p.num_entries,
            "deletions": p.num_deletions,
            "obsolete_entries": table.obsolete_entries(),
            "data_blocks": p.num_data_blocks,
            "data_block_handles": handles.len(),
            "data_bytes": p.data_bytes,
            "data_restart_interval": p.data_restart_interval,
            "raw_key_bytes": p.raw_key_bytes,
            "raw_value_bytes": p.raw_value_bytes,
            "smallest": ikey_json(&p.smallest_key),
            "largest": ikey_json(&p.largest_key),
            "smallest_seq": p.smallest_seq,
            "largest_seq": p.largest_seq,
            "bloom_filter": table.has_filter(),
            "meta_blocks": meta
                .iter()
                .map(|(n, s, h, d, z)| {
                    let mut m = json!({"name": n, "bytes": s, "holds": h});
                    if let Some(d) = d {
                        m["directory"] = dir_json(d);
                    }
                    if let Some(z) = z {
                        m["zone_maps"] = zones_json(z);
                    }
                    m
                })
                .collect::<Vec<_>>(),
        });
        let s = serde_json::to_string_pretty(&v).map_err(|e| CliError::Other(e.to_string()))?;
        return out(format_args!("{s}\n"));
    }
    let mut s = String::new();
    s += &format!(
        "table {} ({size} bytes), level {}\n",
        file.display(),
        level.map_or(
            "unknown (not live in the MANIFEST beside it)".to_string(),
            |l| l.to_string()
        )
    );
    s += &format!(
        "entries {} ({} deletions, {} marked obsolete)\n",
        p.num_entries,
        p.num_deletions,
        table.obsolete_entries()
    );
    s += &format!(
        "keys {} .. {}\nsequence numbers {} .. {}\n",
        ikey_text(&p.smallest_key),
        ikey_text(&p.largest_key),
        p.smallest_seq,
        p.largest_seq
    );
    s += &format!(
        "data blocks {} ({} bytes on disk; raw keys {} B, raw values {} B; restart every {})\n",
        handles.len(),
        p.data_bytes,
        p.raw_key_bytes,
        p.raw_value_bytes,
        match p.data_restart_interval {
            0 => "? entries (not recorded)".to_string(),
            n => format!("{n} entries"),
        }
    );
    s += &format!(
        "bloom filter (strata.filter): {}\n",
        if table.has_filter() { "yes" } else { "no" }
    );
    s += &format!("meta blocks ({}):\n", meta.len());
    for (n, size, holds, dir, zones) in &meta {
        s += &format!("  {n:<20} {size:>10} B  {holds}\n");
        if let Some(z) = zones {
            let filters: usize = z.blocks.iter().filter_map(|b| b.filter_bytes).sum();
            s += &format!(
                "  {:<20} {:>10}    {} values, {} indexed values in {} data blocks, table zone {}, Bloom filters {filters} B\n",
                "",
                "",
                z.key_type.as_str(),
                z.values,
                z.blocks.len(),
                z.zone.as_ref().map_or("(none)".to_string(), |(lo, hi)| format!(
                    "{} .. {}",
                    value_json(lo),
                    value_json(hi)
                )),
            );
            for b in z.blocks.iter().take(TEXT_RANGES) {
                s += &format!(
                    "  {:<20} {:>10}      data block at {}: {} values, {} .. {}\n",
                    "",
                    "",
                    b.offset,
                    b.values,
                    value_json(&b.zone.0),
                    value_json(&b.zone.1)
                );
            }
            if z.blocks.len() > TEXT_RANGES {
                s += &format!(
                    "  {:<20} {:>10}      ... ({} more; --json lists all)\n",
                    "",
                    "",
                    z.blocks.len() - TEXT_RANGES
                );
            }
        }
        if let Some(d) = dir {
            s += &format!(
                "  {:<20} {:>10}    {} values, {} data blocks indexed, {} secondary blocks, {} ranges:\n",
                "",
                "",
                d.key_type.as_str(),
                d.data_blocks,
                d.secondary_blocks,
                d.ranges.len()
            );
            for (b, lo, hi) in d.ranges.iter().take(TEXT_RANGES) {
                s += &format!(
                    "  {:<20} {:>10}      block {b}: {} .. {}\n",
                    "",
                    "",
                    value_json(lo),
                    value_json(hi)
                );
            }
            if d.ranges.len() > TEXT_RANGES {
                s += &format!(
                    "  {:<20} {:>10}      ... ({} more; --json lists all)\n",
                    "",
                    "",
                    d.ranges.len() - TEXT_RANGES
                );
            }
        }
    }
    out(format_args!("{s}"))
}

fn edit_json(e: &VersionEdit) -> Value {
    json!({
        "log_number": e.log_number,
        "next_file_number": e.next_file_number,
        "last_sequence": e.last_sequence,
        "deleted_files": e.deleted_files.iter().map(|(l, n)| json!({"level": l, "number": n})).collect::<Vec<_>>(),
        "new_files": e.new_files.iter().map(|(l, f)| json!({
            "level": l,
            "number": f.number,
            "bytes": f.file_size,
            "smallest": ikey_json(&f.smallest),
            "largest": ikey_json(&f.largest),
            "smallest_seq": f.smallest_seq,
            "largest_seq": f.largest_seq,
            "entries": f.num_entries,
            "deletions": f.num_deletions,
        })).collect::<Vec<_>>(),
        "ext_payloads": e.ext_payloads.iter().map(|(n, p)| json!({"extension": n, "bytes": p.len()})).collect::<Vec<_>>(),
    })
}

fn edit_text(i: usize, e: &VersionEdit) -> String {
    let mut parts = vec![format!("#{i}")];
    if let Some(n) = e.log_number {
        parts.push(format!("log={n}"));
    }
    if let Some(n) = e.next_file_number {
        parts.push(format!("next_file={n}"));
    }
    if let Some(n) = e.last_sequence {
        parts.push(format!("last_seq={n}"));
    }
    for (l, n) in &e.deleted_files {
        parts.push(format!("-L{l}:{n:06}.sst"));
    }
    for (l, f) in &e.new_files {
        parts.push(format!(
            "+L{l}:{:06}.sst({} B, {} entries, seq {}..{}, {}..{})",
            f.number,
            f.file_size,
            f.num_entries,
            f.smallest_seq,
            f.largest_seq,
            ikey_text(&f.smallest),
            ikey_text(&f.largest)
        ));
    }
    for (n, p) in &e.ext_payloads {
        parts.push(format!("ext {n}({} B)", p.len()));
    }
    parts.join(" ")
}

/// `strata manifest DIR`.
pub fn run_manifest(dir: &Path, as_json: bool) -> Result<(), CliError> {
    let (path, edits) = read_edits(dir)?;
    let mut s = String::new();
    if !as_json {
        s += &format!("{}: {} version edits\n", path.display(), edits.len());
    }
    for (i, e) in edits.iter().enumerate() {
        if as_json {
            s += &edit_json(e).to_string();
        } else {
            s += &edit_text(i, e);
        }
        s.push('\n');
    }
    out(format_args!("{s}"))
}

/// `strata wal FILE`.
pub fn run_wal(file: &Path, as_json: bool) -> Result<(), CliError> {
    let f =
        File::open(file).map_err(|e| CliError::Other(format!("open {}: {e}", file.display())))?;
    let mut reader = LogReader::new(f, file.to_path_buf(), WalRecovery::TolerateTornTail);
    let mut s = String::new();
    let mut records = 0u64;
    let mut ops_total = 0u64;
    while let Some(rec) = reader.read_record()? {
        let bytes = rec.len();
        let batch = WriteBatch::from_data(rec)?;
        let seq = batch.sequence();
        let mut ops = Vec::new();
        for op in batch.iter() {
            ops.push(op?);
        }
        ops_total += ops.len() as u64;
        let last = (seq + ops.len() as u64).saturating_sub(1);
        if as_json {
            let v = json!({
                "record": records,
                "bytes": bytes,
                "first_seq": seq,
                "last_seq": last,
                "ops": ops.iter().map(|o| match o {
                    BatchOp::Put { key, value } => json!({"op": "put", "key": show_json(key), "value_bytes": value.len()}),
                    BatchOp::Delete { key } => json!({"op": "del", "key": show_json(key)}),
                    BatchOp::Merge { key, value } => json!({"op": "merge", "key": show_json(key), "value_bytes": value.len()}),
                }).collect::<Vec<_>>(),
            });
            s += &v.to_string();
            s.push('\n');
        } else {
            s += &format!(
                "record {records}: batch of {} ops, seq {seq}..{last}, {bytes} B\n",
                ops.len()
            );
            for o in &ops {
                s += &match o {
                    BatchOp::Put { key, value } => {
                        format!("  put   {} ({} B)\n", show(key), value.len())
                    }
                    BatchOp::Delete { key } => format!("  del   {}\n", show(key)),
                    BatchOp::Merge { key, value } => {
                        format!("  merge {} ({} B)\n", show(key), value.len())
                    }
                };
            }
        }
        records += 1;
        if s.len() > 1 << 16 {
            out(format_args!("{s}"))?;
            s.clear();
        }
    }
    let r = reader.report();
    if !as_json {
        s += &format!(
            "{records} records, {ops_total} operations; torn tail {} B\n",
            r.torn_tail_bytes
        );
    }
    out(format_args!("{s}"))
}
