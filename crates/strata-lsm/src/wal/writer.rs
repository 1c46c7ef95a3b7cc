use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use super::{RecordType, BLOCK_SIZE, HEADER_SIZE};
use crate::coding::{masked_crc2, put_fixed32};
use crate::error::{Error, IoContext, Result};
use crate::io::{Fs, WritableFile};

/// Assembly buffers larger than this are released after the write instead of
/// being kept for the next record.
const MAX_RETAINED_BUF: usize = 1 << 20;

/// Appends logical records to a log file.
///
/// Invariant: `block_offset == len % BLOCK_SIZE`, i.e. the writer's idea of
/// the position inside the current block matches the file. After a failed
/// write the file may end in a partial record, so the writer refuses all
/// further records (`poisoned`); the caller must move on to a new log file.
pub struct LogWriter {
    file: Box<dyn WritableFile>,
    path: PathBuf,
    len: u64,
    block_offset: usize,
    /// Reused assembly buffer: one logical record becomes one `write_all`.
    buf: Vec<u8>,
    poisoned: bool,
    /// The directory to sync before the first sync of the file (a new
    /// WAL: its name must be durable before any write in it is).
    dir_to_sync: Option<Arc<dyn Fs>>,
}

impl LogWriter {
    /// Writes to `file` (positioned at its end, `initial_len` bytes long).
    ///
    /// `initial_len` must be the end of the log's valid prefix: appending
    /// after a torn tail would turn that tail into mid-log corruption.
    pub fn new(file: impl WritableFile + 'static, path: PathBuf, initial_len: u64) -> LogWriter {
        LogWriter {
            file: Box::new(file),
            path,
            len: initial_len,
            block_offset: (initial_len % BLOCK_SIZE as u64) as usize,
            buf: Vec::new(),
            poisoned: false,
            dir_to_sync: None,
        }
    }

    /// Makes the first [`LogWriter::sync`] sync the file's directory first
    /// (through `fs`), so that the file's creation is durable with its
    /// first durable record.
    pub fn sync_dir_first(mut self, fs: Arc<dyn Fs>) -> LogWriter {
        self.dir_to_sync = Some(fs);
        self
    }

    /// Appends one logical record; returns the bytes written to the file
    /// (headers and block padding included). The record is in the OS after
    /// return (not necessarily on disk). An empty record is stored as one
    /// empty FULL fragment.
    pub fn add_record(&mut self, data: &[u8]) -> Result<u64> {
        if self.poisoned {
            return Err(Error::io(
                format!("append to {}", self.path.display()),
                std::io::Error::other("an earlier write to this log failed, or the log was ended"),
            ));
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let block_offset = assemble(&mut buf, self.block_offset, data);
        let res = self
            .file
            .write_all(&buf)
            .path_ctx("append to log", &self.path);
        let written = buf.len() as u64;
        if buf.capacity() <= MAX_RETAINED_BUF {
            self.buf = buf;
        }
        if let Err(e) = res {
            self.poisoned = true;
            return Err(e);
        }
        self.len += written;
        self.block_offset = block_offset;
        Ok(written)
    }

    /// fsyncs the file (data only: the length change is covered by
    /// `sync_data`, other metadata is not needed for recovery).
    pub fn sync(&mut self) -> Result<()> {
        self.sync_dir()?;
        self.file.sync_data().path_ctx("sync log", &self.path)
    }

    /// Ends the log: its records durable as [`LogWriter::sync`] makes
    /// them, and the file no longer than them (a mapped log's populated
    /// zeros are cut before the sync, see [`crate::io::mapped`]). Every
    /// later append fails.
    pub fn finish(&mut self) -> Result<()> {
        self.poisoned = true;
        self.sync_dir()?;
        self.file.finish().path_ctx("finish log", &self.path)
    }

    /// Syncs the file's directory before the file's first sync (see
    /// [`LogWriter::sync_dir_first`]).
    fn sync_dir(&mut self) -> Result<()> {
        if let Some(fs) = &self.dir_to_sync {
            if let Some(dir) = self.path.parent() {
                fs.sync_dir(dir).path_ctx("fsync directory", dir)?;
            }
            self.dir_to_sync = None;
        }
        Ok(())
    }

    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True if the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Appends the physical records of `data` to `buf`, starting at
/// `block_offset` within a block; returns the block offset afterwards.
fn assemble(buf: &mut Vec<u8>, mut block_offset: usize, data: &[u8]) -> usize {
    let per_block = BLOCK_SIZE - HEADER_SIZE;
    buf.reserve(data.len() + (data.len() / per_block + 2) * HEADER_SIZE + HEADER_SIZE);
    let mut left = data;
    let mut first = true;
    loop {
        let leftover = BLOCK_SIZE - block_offset;
        if leftover < HEADER_SIZE {
            // Too small for a header: zero-fill the block's trailer.
            buf.resize(buf.len() + leftover, 0);
            block_offset = 0;
        }
        let avail = BLOCK_SIZE - block_offset - HEADER_SIZE;
        let n = left.len().min(avail);
        let last = n == left.len();
        let ty = match (first, last) {
            (true, true) => RecordType::Full,
            (true, false) => RecordType::First,
            (false, false) => RecordType::Middle,
            (false, true) => RecordType::Last,
        };
        let (frag, rest) = left.split_at(n);
        put_fixed32(buf, masked_crc2(&[ty as u8], frag));
        // n <= BLOCK_SIZE - HEADER_SIZE < 2^16.
        buf.extend_from_slice(&(n as u16).to_le_bytes());
        buf.push(ty as u8);
        buf.extend_from_slice(frag);
        block_offset += HEADER_SIZE + n;
        left = rest;
        first = false;
        if last {
            return block_offset;
        }
    }
}
