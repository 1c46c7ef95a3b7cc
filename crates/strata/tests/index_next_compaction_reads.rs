//! A compaction takes its inputs' NEXT values from their secondary blocks
//! (`IndexStrategy::stored_values`). Those reads are compaction input:
//! they neither pass through the block cache nor count as queries' meta
//! block reads, pinned index or not. (They counted as query reads, about
//! one per secondary block and directory of every input, and filled the
//! cache with blocks no query had asked for.)
#![allow(clippy::unwrap_used, clippy::expect_used)] // helpers outside #[test] fns

mod common;

use common::key;
use common::topk::{expected, opts, query_index, record, Model};
use strata::{Db, IndexSpec, KeyType};

#[test]
fn compaction_reads_next_blocks_as_compaction_input() {
    for pin in ["false", "true"] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), opts()).unwrap();
        db.create_index(
            IndexSpec::field("by_u", "u", KeyType::I64)
                .strategy("next")
                .param("pin", pin),
        )
        .unwrap();
        let mut model = Model::new();
        let mut order = 0u64;
        for t in 0..4u64 {
            for i in 0..800u64 {
                let k = (i * 7 + t * 3) % 2_000;
                let u = ((k + t) % 25) as i64;
                db.put(&key(k), &record(u, k)).unwrap();
                order += 1;
                model.insert(key(k), (order, u));
            }
            db.flush().unwrap();
        }
        let before = db.stats().io;
        db.compact_range(None, None).unwrap();
        let after = db.stats().io;
        let meta = |s: &strata::IoStats| s.meta_blocks.disk + s.meta_blocks.cache;
        // The inputs' secondary blocks and directories: dozens of blocks.
        // What may remain is a table's own open (properties, metaindex).
        assert!(
            meta(&after) - meta(&before) <= 4,
            "pin={pin}: the compaction counted {} meta block reads as queries'",
            meta(&after) - meta(&before)
        );
        assert!(after.compaction_bytes_read > before.compaction_bytes_read);
        // And the index still answers from the compacted table.
        let (got, _) = query_index(&db, "by_u", 0, 9, None);
        assert_eq!(got, expected(&model, 0, 9, usize::MAX), "pin={pin}");
    }
}
