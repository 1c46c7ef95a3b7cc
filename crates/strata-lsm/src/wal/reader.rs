#![deny(clippy::indexing_slicing)]
use std::io::Read;
use std::ops::Range;
use std::path::PathBuf;

use super::{RecordType, BLOCK_SIZE, HEADER_SIZE};
use crate::coding::masked_crc2;
use crate::error::{Error, Result};
use crate::io::mapped::MIN_WINDOW;
use crate::wal::WalRecovery;

/// What a reader skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadReport {
    /// Bytes dropped as a torn tail (an incomplete final write). The log's
    /// valid prefix is `file length - torn_tail_bytes` bytes long (up to a
    /// few bytes of block padding).
    pub torn_tail_bytes: u64,
    /// Bytes of damaged records skipped (only in `BestEffort`).
    pub corrupted_bytes: u64,
}

/// One step of parsing physical records.
enum Phys {
    /// A record that checks out; `payload` indexes the current block.
    Record {
        ty: RecordType,
        start: u64,
        payload: Range<usize>,
    },
    /// End of file at a record boundary.
    End,
    /// The bytes at `start` are not a valid record.
    Bad { start: u64, reason: &'static str },
}

enum State {
    Reading,
    Done,
    Failed(Error),
}

/// Reads logical records back.
///
/// Damage handling: when the bytes at some offset are not a valid record (or
/// a fragment sequence is broken), the reader looks for a FULL or FIRST
/// record that checks out anywhere after that offset. If there is none, the
/// damage is a torn tail: it ends the log and is counted in
/// `torn_tail_bytes`. If there is one, the damage is corruption: an error in
/// `TolerateTornTail` mode, skipped up to that record in `BestEffort` mode.
/// A record cut off by the end of the file is damage like any other: a
/// genuinely torn write has nothing valid after it, while a damaged length
/// field that points past the end must not hide the records it covers.
///
/// Damage that no torn write of the `write`-call writer can leave (see
/// `certain_damage`: a complete record failing its checksum, a bad type, a
/// length the writer never writes) is corruption even at the end of the
/// log: the record may be an acknowledged, synced write. Only bytes cut off
/// by the end of the file (or zero-filled) are a torn tail — and, for a log
/// that ends in a mapped writer's zero-filled preallocated window (it did
/// not close), certain damage with nothing valid after it: the copy of the
/// last record into the mapping was cut short (a copy does not fill the
/// file in order), so its bytes can be a complete length with zeros inside.
///
/// Memory is bounded by one block plus the logical record being assembled,
/// which only grows from fragments whose checksums match.
pub struct LogReader {
    file: Box<dyn Read + Send>,
    path: PathBuf,
    mode: WalRecovery,
    /// The current block: file bytes `[buf_start, buf_start + buf.len())`.
    /// `buf_start` is a multiple of `BLOCK_SIZE`; `buf.len() < BLOCK_SIZE`
    /// only for the last block of the file, and then `eof` is set.
    buf: Vec<u8>,
    buf_start: u64,
    /// Parse position in `buf`.
    pos: usize,
    eof: bool,
    /// The file's last byte read so far.
    last_byte: Option<u8>,
    state: State,
    report: ReadReport,
}

impl LogReader {
    /// A reader of the log `file` (named `path` in errors) from its start,
    /// treating damage as `mode` says.
    pub fn new(file: impl Read + Send + 'static, path: PathBuf, mode: WalRecovery) -> LogReader {
        LogReader {
            file: Box::new(file),
            path,
            mode,
            buf: Vec::new(),
            buf_start: 0,
            pos: 0,
            eof: false,
            last_byte: None,
            state: State::Reading,
            report: ReadReport::default(),
        }
    }

    /// Next logical record, `None` at the end of the log (or of its valid
    /// prefix if the tail is torn). Damage followed by valid records is
    /// `Error::Corruption` in `TolerateTornTail` mode. After `None` or an
    /// error, every further call returns the same.
    pub fn read_record(&mut self) -> Result<Option<Vec<u8>>> {
        match &self.state {
            State::Reading => {}
            State::Done => return Ok(None),
            State::Failed(e) => return Err(e.clone()),
        }
        let res = self.read_logical();
        match &res {
            Ok(Some(_)) => {}
            Ok(None) => self.state = State::Done,
            Err(e) => self.state = State::Failed(e.clone()),
        }
        res
    }

    /// What was skipped so far.
    pub fn report(&self) -> &ReadReport {
        &self.report
    }

    fn read_logical(&mut self) -> Result<Option<Vec<u8>>> {
        let mut rec = Vec::new();
        // File offset of the FIRST fragment of the record being assembled.
        let mut frag_start: Option<u64> = None;
        loop {
            match self.next_physical()? {
                Phys::Record { ty, start, payload } => match ty {
                    RecordType::Full | RecordType::First => {
                        if let Some(fs) = frag_start.take() {
                            // A valid record follows the unfinished one.
                            self.corrupt(fs, start, "FIRST fragment without LAST")?;
                            rec.clear();
                        }
                        if ty == RecordType::Full {
                            return Ok(Some(self.payload(payload)?.to_vec()));
                        }
                        rec.extend_from_slice(self.payload(payload)?);
                        frag_start = Some(start);
                    }
                    RecordType::Middle | RecordType::Last => {
                        if frag_start.is_none() {
                            if !self.skip_damage(start, start, "fragment without FIRST", false)? {
                                return Ok(None);
                            }
                            continue;
                        }
                        rec.extend_from_slice(self.payload(payload)?);
                        if ty == RecordType::Last {
                            return Ok(Some(rec));
                        }
                    }
                },
                Phys::End => {
                    if let Some(fs) = frag_start {
                        self.torn_from(fs);
                    }
                    return Ok(None);
                }
                Phys::Bad { start, reason } => {
                    let certain = self.certain_damage(start, reason);
                    let damage_start = frag_start.take().unwrap_or(start);
                    rec.clear();
                    if !self.skip_damage(damage_start, start, reason, certain)? {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Handles damage spanning from `damage_start` to at least `at` (an
    /// offset in the current block). Returns false if the log ends there
    /// (a torn tail, or with `certain` damage that `BestEffort` skips),
    /// true if parsing resumes at a later FULL/FIRST record. `certain`
    /// damage with nothing valid after it is an error in `TolerateTornTail`
    /// mode — unless the file ends in a mapped writer's zero-filled
    /// preallocated window: that writer's last copy, cut short by a crash,
    /// can leave a complete record with zeros inside it (a copy is not a
    /// prefix in file order), a torn tail.
    fn skip_damage(
        &mut self,
        damage_start: u64,
        at: u64,
        reason: &str,
        certain: bool,
    ) -> Result<bool> {
        match self.scan_for_record_start(at + 1)? {
            None if certain && !self.ends_in_preallocated_window() => {
                if self.mode == WalRecovery::TolerateTornTail {
                    return Err(Error::corruption_at(
                        &self.path,
                        Some(damage_start),
                        format!("a valid log record ({reason}; not a torn write)"),
                    ));
                }
                let end = self.buf_start + self.buf.len() as u64;
                self.report.corrupted_bytes += end.saturating_sub(damage_start);
                Ok(false)
            }
            None => {
                self.torn_from(damage_start);
                Ok(false)
            }
            Some(next) => {
                self.corrupt(damage_start, next, reason)?;
                Ok(true)
            }
        }
    }

    /// Damage in `[damage_start, next_valid)` with a valid record at
    /// `next_valid`: an error, or skipped and counted in `BestEffort` mode.
    fn corrupt(&mut self, damage_start: u64, next_valid: u64, reason: &str) -> Result<()> {
        match self.mode {
            WalRecovery::TolerateTornTail => Err(Error::corruption_at(
                &self.path,
                Some(damage_start),
                format!(
                    "a valid log record ({reason}), followed by a valid record at offset \
                     {next_valid}"
                ),
            )),
            WalRecovery::BestEffort => {
                self.report.corrupted_bytes += next_valid - damage_start;
                Ok(())
            }
        }
    }

    /// Is the damage at `start` certainly not a torn write? True for a complete record with a bad checksum or type, a length
    /// crossing the block end (the writer never does that), and a record
    /// "cut off" by the end of the file whose available bytes pass the
    /// stored checksum (its length field, not the write, is damaged).
    fn certain_damage(&self, start: u64, reason: &str) -> bool {
        match reason {
            "checksum mismatch" | "bad record type" | "record length crosses the block end" => true,
            "record cut off by the end of the file" => {
                let Some(i) = start.checked_sub(self.buf_start).map(|i| i as usize) else {
                    return false;
                };
                let Some((header, payload)) = self
                    .buf
                    .get(i..)
                    .and_then(|rest| rest.split_first_chunk::<HEADER_SIZE>())
                else {
                    return false;
                };
                let [c0, c1, c2, c3, _, _, type_byte] = *header;
                !payload.is_empty()
                    && u32::from_le_bytes([c0, c1, c2, c3]) == masked_crc2(&[type_byte], payload)
            }
            _ => false,
        }
    }

    /// The whole file has been read and it ends as a mapped writer that
    /// did not close leaves it (`io::mapped`): its length is a whole number
    /// of [`MIN_WINDOW`]s and its last byte is zero (a closed log is
    /// truncated to its records).
    fn ends_in_preallocated_window(&self) -> bool {
        let len = self.buf_start + self.buf.len() as u64;
        self.eof && len > 0 && len.is_multiple_of(MIN_WINDOW) && self.last_byte == Some(0)
    }

    /// Everything from `offset` to the end of the file is a torn tail.
    /// Only called once the whole file has been read.
    fn torn_from(&mut self, offset: u64) {
        debug_assert!(self.eof);
        let end = self.buf_start + self.buf.len() as u64;
        self.report.torn_tail_bytes += end.saturating_sub(offset);
    }

    fn next_physical(&mut self) -> Result<Phys> {
        loop {
            if self.pos >= self.buf.len() {
                if self.eof {
                    return Ok(Phys::End);
                }
                self.read_next_block()?;
                continue;
            }
            let start = self.buf_start + self.pos as u64;
            let block_left = BLOCK_SIZE - self.pos;
            if block_left < HEADER_SIZE {
                // Block trailer: zero padding written by the writer.
                self.pos = self.buf.len();
                continue;
            }
            let rest = self.buf.get(self.pos..).unwrap_or(&[]);
            // Fewer bytes than the block has left only in the last block.
            let Some(header) = rest.first_chunk::<HEADER_SIZE>() else {
                return Ok(Phys::Bad {
                    start,
                    reason: "header cut off by the end of the file",
                });
            };
            let [c0, c1, c2, c3, l0, l1, type_byte] = *header;
            let Some(ty) = RecordType::from_u8(type_byte) else {
                let reason = if header.iter().all(|&b| b == 0) {
                    "zero-filled header"
                } else {
                    "bad record type"
                };
                return Ok(Phys::Bad { start, reason });
            };
            let len = u16::from_le_bytes([l0, l1]) as usize;
            if HEADER_SIZE + len > block_left {
                return Ok(Phys::Bad {
                    start,
                    reason: "record length crosses the block end",
                });
            }
            if HEADER_SIZE + len > rest.len() {
                // Usually a torn write; but the length may be the damaged
                // part, hiding valid records, so it gets the same scan.
                return Ok(Phys::Bad {
                    start,
                    reason: "record cut off by the end of the file",
                });
            }
            let stored = u32::from_le_bytes([c0, c1, c2, c3]);
            let payload = self.pos + HEADER_SIZE..self.pos + HEADER_SIZE + len;
            if masked_crc2(&[type_byte], self.payload(payload.clone())?) != stored {
                return Ok(Phys::Bad {
                    start,
                    reason: "checksum mismatch",
                });
            }
            self.pos = payload.end;
            return Ok(Phys::Record { ty, start, payload });
        }
    }

    /// Positions the reader at the first FULL or FIRST record that checks
    /// out and starts at file offset `from` or later (`from` lies in the
    /// current block or at its end). Returns its offset, or `None` after
    /// consuming the rest of the file.
    ///
    /// Every offset is tried, since damage may have destroyed the lengths
    /// that lead from record to record. A record embedded in a payload can
    /// therefore be mistaken for a real one; that errs towards reporting
    /// corruption rather than silently dropping data.
    fn scan_for_record_start(&mut self, from: u64) -> Result<Option<u64>> {
        let mut i = from.saturating_sub(self.buf_start) as usize;
        loop {
            while i + HEADER_SIZE <= self.buf.len() {
                if starts_logical_record(self.buf.get(i..).unwrap_or(&[])) {
                    self.pos = i;
                    return Ok(Some(self.buf_start + i as u64));
                }
                i += 1;
            }
            if self.eof {
                self.pos = self.buf.len();
                return Ok(None);
            }
            self.read_next_block()?;
            i = 0;
        }
    }

    /// The bytes of a record's payload in the current block.
    fn payload(&self, range: Range<usize>) -> Result<&[u8]> {
        self.buf.get(range.clone()).ok_or_else(|| {
            Error::corruption(format!(
                "log {}: record payload {range:?} lies outside the {}-byte block read",
                self.path.display(),
                self.buf.len()
            ))
        })
    }

    /// Replaces the current block with the next one.
    fn read_next_block(&mut self) -> Result<()> {
        self.buf_start += self.buf.len() as u64;
        self.pos = 0;
        self.buf.resize(BLOCK_SIZE, 0);
        let mut n = 0;
        while n < BLOCK_SIZE {
            let Some(unread) = self.buf.get_mut(n..) else {
                break;
            };
            match self.file.read(unread) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(Error::io(
                        format!(
                            "read log {} at offset {}",
                            self.path.display(),
                            self.buf_start + n as u64
                        ),
                        e,
                    ))
                }
            }
        }
        self.buf.truncate(n);
        if let Some(&b) = self.buf.last() {
            self.last_byte = Some(b);
        }
        if n < BLOCK_SIZE {
            self.eof = true;
        }
        Ok(())
    }
}

/// True if `rest` (the remainder of a block) starts with a FULL or FIRST
/// record that lies within it and checks out.
fn starts_logical_record(rest: &[u8]) -> bool {
    let Some((header, after)) = rest.split_first_chunk::<HEADER_SIZE>() else {
        return false;
    };
    let [c0, c1, c2, c3, l0, l1, type_byte] = *header;
    if type_byte != RecordType::Full as u8 && type_byte != RecordType::First as u8 {
        return false;
    }
    let len = u16::from_le_bytes([l0, l1]) as usize;
    let Some(payload) = after.get(..len) else {
        return false;
    };
    u32::from_le_bytes([c0, c1, c2, c3]) == masked_crc2(&[type_byte], payload)
}
