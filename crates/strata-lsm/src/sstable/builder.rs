//! Writes a table file.
//!
//! Entries stream into a data block; when the block reaches `block_size` it
//! is compressed, checksummed and written, and its last key and handle go
//! into the index block. Observers see a block's entries only once it is
//! written, so the handle they receive is final. `finish` appends the meta
//! blocks (filter, properties, observers' named blocks), the metaindex, the
//! index block and the footer, then fsyncs. Layout: `docs/format/sstable.md`.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};
use crate::io::{Fs, RealFs, WritableFile};
use crate::key::{compare_internal, parse_internal_key, ValueKind};
use crate::sstable::block::BlockBuilder;
use crate::sstable::filter::BloomBuilder;
use crate::sstable::format::{block_trailer, compress_block, Footer, BLOCK_TRAILER_LEN};
use crate::sstable::observer::{EntryRef, TableObserver};
use crate::sstable::obsolete::{ObsoleteMap, OBSOLETE_BLOCK_NAME};
use crate::sstable::Compression;
use crate::sstable::{BlockHandle, TableProperties};

/// Metaindex name of the Bloom filter block.
pub const FILTER_BLOCK_NAME: &str = "strata.filter";
/// Metaindex name of the properties block.
pub const PROPERTIES_BLOCK_NAME: &str = "strata.properties";
/// Prefix reserved for the engine's own meta blocks.
pub const RESERVED_META_PREFIX: &str = "strata.";

/// Options for building one table.
#[derive(Debug, Clone)]
pub struct TableBuildOptions {
    /// Target uncompressed size of a data block.
    pub block_size: usize,
    /// Keys between restart points in a block.
    pub restart_interval: usize,
    /// Compression of data blocks.
    pub compression: Compression,
    /// 0 = no filter.
    pub bloom_bits_per_key: usize,
    /// Where the table is written.
    pub fs: Arc<dyn Fs>,
}

impl TableBuildOptions {
    /// Options on the real file system.
    pub fn new(
        block_size: usize,
        restart_interval: usize,
        compression: Compression,
        bloom_bits_per_key: usize,
    ) -> TableBuildOptions {
        TableBuildOptions {
            block_size,
            restart_interval,
            compression,
            bloom_bits_per_key,
            fs: Arc::new(RealFs),
        }
    }
}

/// A finished table.
#[derive(Debug, Clone)]
pub struct BuiltTable {
    /// Size of the file written, in bytes.
    pub file_size: u64,
    /// Its properties block.
    pub properties: TableProperties,
}

/// Entries of the pending data block, kept only when there are observers:
/// internal keys and values concatenated in `bytes`, with (key_len,
/// value_len) per entry.
#[derive(Default)]
struct PendingEntries {
    bytes: Vec<u8>,
    lens: Vec<(usize, usize)>,
}

/// Writes one table. Entries must be added in strictly increasing
/// internal-key order.
///
/// If any call fails, the builder is poisoned (later calls return the same
/// error) and the caller should delete the partial file.
pub struct TableBuilder {
    path: PathBuf,
    file: BufWriter<Box<dyn WritableFile>>,
    /// Bytes written to `file` so far (the offset of the next block).
    offset: u64,
    opts: TableBuildOptions,
    observers: Vec<Box<dyn TableObserver>>,
    data_block: BlockBuilder,
    index_block: BlockBuilder,
    pending: PendingEntries,
    filter: Option<BloomBuilder>,
    /// Last internal key added (empty before the first add).
    last_key: Vec<u8>,
    props: TableProperties,
    error: Option<Error>,
}

impl TableBuilder {
    /// Creates the file at `path` (must not exist).
    pub fn new(
        path: &Path,
        opts: TableBuildOptions,
        observers: Vec<Box<dyn TableObserver>>,
    ) -> Result<TableBuilder> {
        if opts.block_size == 0 {
            return Err(Error::invalid("block_size must be positive"));
        }
        let file = opts.fs.create(path, true).path_ctx("create table", path)?;
        let filter =
            (opts.bloom_bits_per_key > 0).then(|| BloomBuilder::new(opts.bloom_bits_per_key));
        Ok(TableBuilder {
            path: path.to_path_buf(),
            file: BufWriter::with_capacity(64 << 10, file),
            offset: 0,
            data_block: BlockBuilder::new(opts.restart_interval),
            index_block: BlockBuilder::new(1),
            pending: PendingEntries::default(),
            filter,
            last_key: Vec::new(),
            props: TableProperties {
                smallest_seq: u64::MAX,
                // As `BlockBuilder::new` applies it.
                data_restart_interval: opts.restart_interval.max(1) as u64,
                ..TableProperties::default()
            },
            opts,
            observers,
            error: None,
        })
    }

    /// Adds an entry; `Error::InvalidArgument` if out of order, corruption if
    /// the key is not a valid internal key.
    pub fn add(&mut self, ikey: &[u8], value: &[u8]) -> Result<()> {
        self.check()?;
        let parsed = parse_internal_key(ikey)?;
        let first = self.props.num_entries == 0;
        if !first && compare_internal(&self.last_key, ikey).is_ge() {
            return Err(Error::invalid(format!(
                "table {}: keys added out of order",
                self.path.display()
            )));
        }
        if let Some(f) = &mut self.filter {
            if first || parsed.user_key != crate::key::user_key(&self.last_key) {
                f.add_key(parsed.user_key);
            }
        }
        let p = &mut self.props;
        if first {
            p.smallest_key = ikey.to_vec();
        }
        p.num_entries += 1;
        if parsed.kind == ValueKind::Deletion {
            p.num_deletions += 1;
        }
        p.smallest_seq = p.smallest_seq.min(parsed.seq);
        p.largest_seq = p.largest_seq.max(parsed.seq);
        p.raw_key_bytes += ikey.len() as u64;
        p.raw_value_bytes += value.len() as u64;

        self.data_block.add(ikey, value);
        if !self.observers.is_empty() {
            self.pending.bytes.extend_from_slice(ikey);
            self.pending.bytes.extend_from_slice(value);
            self.pending.lens.push((ikey.len(), value.len()));
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(ikey);

        if self.data_block.size_estimate() >= self.opts.block_size {
            let r = self.flush_data_block();
            return self.poison_on_err(r);
        }
        Ok(())
    }

    /// Entries added so far.
    pub fn num_entries(&self) -> u64 {
        self.props.num_entries
    }

    /// Bytes written so far plus the pending block.
    pub fn file_size(&self) -> u64 {
        let pending = if self.data_block.is_empty() {
            0
        } else {
            (self.data_block.size_estimate() + BLOCK_TRAILER_LEN) as u64
        };
        self.offset + pending
    }

    /// Writes meta blocks (filter, properties, observers' blocks),
    /// metaindex, index and footer; fsyncs the file.
    pub fn finish(mut self) -> Result<BuiltTable> {
        self.check()?;
        self.flush_data_block()?;

        let mut named: Vec<(String, Vec<u8>)> = Vec::new();
        for obs in &mut self.observers {
            for (name, bytes) in obs.finish()? {
                if name.starts_with(RESERVED_META_PREFIX) {
                    return Err(Error::invalid(format!(
                        "meta block name {name:?} uses the reserved prefix {RESERVED_META_PREFIX:?}"
                    )));
                }
                named.push((name, bytes));
            }
        }
        // Names are unique (checked on a sorted list: a NEXT table has
        // hundreds of named blocks, and a pairwise check was quadratic).
        let mut names: Vec<&str> = named.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        if let Some(w) = names.windows(2).find(|w| w.first() == w.get(1)) {
            let name = w.first().copied().unwrap_or_default();
            return Err(Error::invalid(format!(
                "meta block name {name:?} is used twice"
            )));
        }
        let mut marks: Vec<(u64, u32)> = Vec::new();
        for obs in &mut self.observers {
            marks.extend(
                obs.obsolete_entries()
                    .into_iter()
                    .map(|(h, i)| (h.offset, i)),
            );
        }
        let obsolete = ObsoleteMap::from_marks(self.opts.restart_interval, &marks);

        if self.props.num_entries == 0 {
            self.props.smallest_seq = 0;
        }
        self.props.largest_key = self.last_key.clone();

        let mut meta: Vec<(String, BlockHandle)> = Vec::new();
        if let Some(mut f) = self.filter.take() {
            let bytes = f.finish();
            let h = self.write_block(&bytes, Compression::None)?;
            meta.push((FILTER_BLOCK_NAME.to_string(), h));
        }
        let props = self.props.encode();
        let h = self.write_block(&props, Compression::None)?;
        meta.push((PROPERTIES_BLOCK_NAME.to_string(), h));
        if !obsolete.is_empty() {
            let h = self.write_block(&obsolete.encode(), Compression::None)?;
            meta.push((OBSOLETE_BLOCK_NAME.to_string(), h));
        }
        for (name, bytes) in &named {
            if bytes.len() > u32::MAX as usize {
                return Err(Error::invalid(format!(
                    "meta block {name:?} of {} bytes exceeds 4 GiB",
                    bytes.len()
                )));
            }
            // A named block is stored as a one-entry block (key = name,
            // value = payload) so it can be cached and verified like any
            // other block.
            let mut b = BlockBuilder::new(1);
            b.add(name.as_bytes(), bytes);
            let wrapped = b.finish().to_vec();
            let h = self.write_block(&wrapped, self.opts.compression)?;
            meta.push((name.clone(), h));
        }
        meta.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));

        let mut metaindex = BlockBuilder::new(1);
        for (name, h) in &meta {
            metaindex.add(name.as_bytes(), &h.encoded());
        }
        let metaindex_bytes = metaindex.finish().to_vec();
        let metaindex_handle = self.write_block(&metaindex_bytes, Compression::None)?;

        let index_bytes = self.index_block.finish().to_vec();
        let index_handle = self.write_block(&index_bytes, self.opts.compression)?;

        let footer = Footer {
            metaindex: metaindex_handle,
            index: index_handle,
        }
        .encode();
        self.write_raw(&footer)?;
        self.file.flush().path_ctx("write table", &self.path)?;
        self.file
            .get_mut()
            .sync_data()
            .path_ctx("fsync", &self.path)?;
        Ok(BuiltTable {
            file_size: self.offset,
            properties: self.props,
        })
    }

    fn check(&self) -> Result<()> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn poison_on_err(&mut self, r: Result<()>) -> Result<()> {
        if let Err(e) = &r {
            self.error = Some(e.clone());
        }
        r
    }

    fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .path_ctx("write table", &self.path)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Writes `raw` (compressed per `compression`) plus its trailer; returns
    /// its handle.
    fn write_block(&mut self, raw: &[u8], compression: Compression) -> Result<BlockHandle> {
        let (stored, block_type) = compress_block(raw, compression);
        let handle = BlockHandle::new(self.offset, stored.len() as u64);
        let trailer = block_trailer(&stored, block_type);
        self.write_raw(&stored)?;
        self.write_raw(&trailer)?;
        Ok(handle)
    }

    /// Writes the pending data block (if any), indexes it and delivers its
    /// entries to the observers.
    fn flush_data_block(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        let contents = self.data_block.finish().to_vec();
        let handle = self.write_block(&contents, self.opts.compression)?;
        self.data_block.reset();
        self.index_block.add(&self.last_key, &handle.encoded());
        self.props.num_data_blocks += 1;
        self.props.data_bytes += handle.size + BLOCK_TRAILER_LEN as u64;

        if !self.observers.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            let mut entries = Vec::with_capacity(pending.lens.len());
            let mut pos = 0;
            for &(klen, vlen) in &pending.lens {
                let ikey = &pending.bytes[pos..pos + klen];
                let value = &pending.bytes[pos + klen..pos + klen + vlen];
                pos += klen + vlen;
                // Validated in `add`.
                let p = parse_internal_key(ikey)?;
                entries.push(EntryRef {
                    user_key: p.user_key,
                    seq: p.seq,
                    kind: p.kind,
                    value,
                });
            }
            for obs in &mut self.observers {
                obs.before_block(&entries);
            }
            for entry in &entries {
                for obs in &mut self.observers {
                    obs.on_entry(entry, handle);
                }
            }
            for obs in &mut self.observers {
                obs.on_block_finished(handle);
            }
            self.pending = pending;
            self.pending.bytes.clear();
            self.pending.lens.clear();
        }
        Ok(())
    }
}
