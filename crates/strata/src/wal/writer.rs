use std::fs::File;
use std::path::PathBuf;

use crate::error::Result;

/// Appends logical records to a log file.
pub struct LogWriter {
    _private: (),
}

impl LogWriter {
    /// Writes to `file` (positioned at its end, `initial_len` bytes long).
    pub fn new(file: File, path: PathBuf, initial_len: u64) -> LogWriter {
        let _ = (file, path, initial_len);
        todo!("wal helper")
    }
    /// Appends one logical record; returns the bytes written to the file.
    /// The record is in the OS after return (not necessarily on disk).
    pub fn add_record(&mut self, data: &[u8]) -> Result<u64> {
        let _ = data;
        todo!()
    }
    /// fsyncs the file.
    pub fn sync(&mut self) -> Result<()> {
        todo!()
    }
    /// Bytes in the file.
    pub fn len(&self) -> u64 {
        todo!()
    }
}
