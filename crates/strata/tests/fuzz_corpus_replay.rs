//! Replays the saved fuzz corpus (`fuzz/corpus/<target>/`) through every
//! fuzz target's body, so that a decoder regression on any saved input
//! fails the test suite without a fuzzer. `write_seed_corpus` (ignored)
//! harvests real encodings from a database with every strategy as seeds.

#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

use std::path::{Path, PathBuf};
use std::sync::Arc;

use strata::lsm::sstable::table::{Table, TableReadOptions};
use strata::{Db, IndexSpec, KeyType, Options, StrategyKind, WriteBatch};

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus")
}

#[test]
fn every_target_replays_its_saved_corpus() {
    let root = corpus_root();
    let mut total = 0;
    for (name, body) in strata::fuzzing::targets() {
        let dir = root.join(name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("fuzz corpus of target {name} ({}): {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "fuzz target {name} has no saved corpus");
        for f in &files {
            let data = std::fs::read(f).unwrap();
            let run = std::panic::catch_unwind(|| body(&data));
            assert!(run.is_ok(), "fuzz target {name} panics on {}", f.display());
        }
        total += files.len();
    }
    assert!(total > 0);
}

fn save(target: &str, data: &[u8]) {
    let dir = corpus_root().join(target);
    std::fs::create_dir_all(&dir).unwrap();
    let name = format!("seed-{:016x}", fnv(data));
    std::fs::write(dir.join(name), data).unwrap();
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Harvests seeds: every kind of block, file and record from a small
/// database with an index of every strategy on an i64 and a point
/// attribute. Run once with `--ignored` after a format change.
#[test]
#[ignore]
fn write_seed_corpus() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("db");
    let opts = Options {
        memtable_size: 16 << 10,
        ..Options::default()
    };
    let db = Db::open(&dir, opts).unwrap();
    let mut type_byte = std::collections::BTreeMap::new();
    for (i, kind) in StrategyKind::ALL.iter().enumerate() {
        let u = format!("u{i}");
        let c = format!("c{i}");
        db.create_index(IndexSpec::field(&u, "u", KeyType::I64).strategy(kind.name()))
            .unwrap();
        db.create_index(IndexSpec::field(&c, "c", KeyType::Point).strategy(kind.name()))
            .unwrap();
    }
    for r in 0..600u64 {
        let mut b = WriteBatch::new();
        let k = format!("k{:04}", r % 400);
        let v = format!(
            r#"{{"u": {}, "c": [{}.5, {}], "t": "text \u00e9 {r}"}}"#,
            r % 17,
            r % 13,
            r % 7
        );
        b.put(k.as_bytes(), v.as_bytes());
        if r % 9 == 0 {
            b.delete(format!("k{:04}", (r * 7) % 400).as_bytes());
        }
        db.write(b, Default::default()).unwrap();
        if r % 150 == 149 {
            db.flush().unwrap();
        }
    }
    db.flush().unwrap();
    for info in db.indexes() {
        let ty = match info.spec.key_type {
            KeyType::I64 => 0u8,
            _ => 3u8,
        };
        type_byte.insert(info.id, ty);
    }
    drop(db);

    // Tables (the primary's and the stand-alone trees'), WALs, MANIFESTs.
    let mut files = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    for p in files {
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        let bytes = std::fs::read(&p).unwrap();
        if name.ends_with(".log") || name.starts_with("MANIFEST") {
            save("wal_records", &bytes[..bytes.len().min(8 << 10)]);
            continue;
        }
        if !name.ends_with(".sst") {
            continue;
        }
        let number: u64 = name.trim_end_matches(".sst").parse().unwrap();
        let table = Arc::new(
            Table::open(&p, number, bytes.len() as u64, TableReadOptions::uncached()).unwrap(),
        );
        save("footer", &bytes[bytes.len() - 48.min(bytes.len())..]);
        save("table_properties", &table.properties().encode());
        for h in table.data_block_handles().unwrap().iter().take(1) {
            let raw = &bytes[h.offset as usize..(h.offset + h.size) as usize + 5];
            save("block_trailer", raw);
            save("data_block", &raw[..raw.len() - 5]);
        }
        for m in table.meta_block_names() {
            let Some(b) = table.meta_block(&m).unwrap() else {
                continue;
            };
            let id = m.split('.').nth(1).and_then(|s| s.parse::<u32>().ok());
            let ty = id.and_then(|i| type_byte.get(&i)).copied().unwrap_or(0);
            let typed = || [&[ty][..], &b].concat();
            if m == "next.memo" {
                save("memo_block", &b);
            } else if m.starts_with("next.") && m.ends_with(".dir") {
                save("next_directory", &typed());
            } else if m.starts_with("next.") {
                save("next_secondary_block", &typed());
            } else if m.starts_with("embedded.") {
                save("embedded_zone_maps", &typed());
            } else if m.starts_with("filter.") {
                save("range_filter", &typed());
            } else if m.contains("filter") {
                save("bloom_filter", &b);
            } else if m.contains("obsolete") {
                save("obsolete_bitmap", &b);
            }
        }
        // Stand-alone trees' entries and posting lists are their keys and
        // values.
        let mut it = table.iter(strata::lsm::stats::ReadPurpose::Query);
        use strata::lsm::iter::InternalIterator;
        it.seek_to_first().unwrap();
        let mut n = 0;
        while it.valid() && n < 2 {
            let k = it.key().to_vec();
            save("internal_key", &k);
            let user = &k[..k.len() - 8];
            save("standalone_entry", &[&[0u8][..], user].concat());
            save("posting_list", it.value());
            it.next().unwrap();
            n += 1;
        }
    }
    let mut f = strata::lsm::sstable::filter::BloomBuilder::new(10);
    for i in 0..40u32 {
        f.add_key(&i.to_le_bytes());
    }
    save("bloom_filter", &f.finish());
    let marks = [(0, 1), (4096, 3), (4096, 40)];
    save(
        "obsolete_bitmap",
        &strata::lsm::sstable::obsolete::ObsoleteMap::from_marks(16, &marks).encode(),
    );
    let mut b = WriteBatch::new();
    b.put(b"k", b"v").delete(b"d");
    save("write_batch", b.data());
    save(
        "manifest_edit",
        &strata::lsm::version::VersionEdit::default().encode(),
    );
    save("index_value", &[0, 0x80, 0, 0, 0, 0, 0, 0, 7]);
    save(
        "index_value",
        &[3, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f, 0, 0, 0, 0, 0, 0, 0, 0x40],
    );
    save(
        "json_fields",
        br#"{"user_id": 7, "coordinates": [1.5, -2], "a": {"b": 1, "0": "x"}}"#,
    );
    save(
        "json_fields",
        br#"{"a": [1, {"c": 2}], "a": 5, "b": [0, {"c": "s"}]}"#,
    );
    save("model", &[0, 0, 1, 8, 2, 7, 1, 5, 0, 6, 0, 7, 1]);
    save("model", &[2, 0, 1, 16, 1, 4, 1, 7, 0, 5, 5, 6, 6, 7, 2]);
    save("model", &[5, 8, 3, 7, 0, 6, 1, 7, 3, 4, 3, 5, 0, 7, 1]);
}
