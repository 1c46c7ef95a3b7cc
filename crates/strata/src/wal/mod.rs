//! The write-ahead log, in LevelDB's log format: 32 KiB blocks of
//! checksummed physical records (FULL/FIRST/MIDDLE/LAST) that carry logical
//! records of any length. Also the container format of the MANIFEST.
//! Specified in `docs/format/wal.md`.

mod reader;
mod writer;

pub use reader::{LogReader, ReadReport};
pub use writer::LogWriter;

/// Size of a log block.
pub const BLOCK_SIZE: usize = 32 * 1024;
/// checksum (4) + length (2) + type (1).
pub const HEADER_SIZE: usize = 7;
