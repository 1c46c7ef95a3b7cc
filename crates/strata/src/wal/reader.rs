use std::fs::File;
use std::path::PathBuf;

use crate::error::Result;
use crate::options::WalRecovery;

/// What a reader skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Bytes dropped as a torn tail (an incomplete final write).
    pub torn_tail_bytes: u64,
    /// Bytes of damaged records skipped (only in `BestEffort`).
    pub corrupted_bytes: u64,
}

/// Reads logical records back.
pub struct LogReader {
    _private: (),
}

impl LogReader {
    pub fn new(file: File, path: PathBuf, mode: WalRecovery) -> LogReader {
        let _ = (file, path, mode);
        todo!("wal helper")
    }
    /// Next logical record, `None` at the end of the log (or of its valid
    /// prefix if the tail is torn). Damage followed by valid records is
    /// `Error::Corruption` in `TolerateTornTail` mode.
    pub fn read_record(&mut self) -> Result<Option<Vec<u8>>> {
        todo!()
    }
    pub fn report(&self) -> &ReadReport {
        todo!()
    }
}
