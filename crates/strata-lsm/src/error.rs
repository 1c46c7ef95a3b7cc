//! The typed error of every fallible Strata call.
//!
//! Contract: library code never panics on bad input or bad bytes; it returns
//! one of these variants with enough context (file, offset, operation) for an
//! operator to act on.

use std::fmt;
use std::path::{Path, PathBuf};

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every error a Strata call can return. New variants may be added: match
/// with a wildcard arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error, with what we were doing at the time.
    Io {
        /// What was being done, usually naming the file.
        context: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Bytes on disk failed a checksum or could not be decoded. Never
    /// returned as data: the read fails instead.
    Corruption(Corruption),
    /// The caller passed something we refuse (oversized key, bad option, ...).
    /// Nothing was changed.
    InvalidArgument(String),
    /// A named thing (index, table file) does not exist.
    NotFound(String),
    /// The database directory is locked by another process or handle.
    Locked(String),
    /// An earlier background error (failed flush or compaction write) put the
    /// database in read-only mode; reopen to recover.
    Background(String),
    /// The database is shutting down.
    Closed,
}

/// Where damaged bytes are and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Corruption {
    /// The file holding them, when known.
    pub file: Option<PathBuf>,
    /// Byte offset in `file` of the damaged record or block, when known.
    pub offset: Option<u64>,
    /// What was expected there (and usually what was found).
    pub expected: String,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.file, self.offset) {
            (Some(p), Some(o)) => write!(f, "{} at offset {o}: {}", p.display(), self.expected),
            (Some(p), None) => write!(f, "{}: {}", p.display(), self.expected),
            (None, Some(o)) => write!(f, "at offset {o}: {}", self.expected),
            (None, None) => f.write_str(&self.expected),
        }
    }
}

impl Error {
    /// An I/O error with what was being done (usually naming the file).
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Error {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Corruption with what was expected; the caller that knows the file
    /// adds it with [`Error::with_location`].
    pub fn corruption(expected: impl Into<String>) -> Error {
        Error::Corruption(Corruption {
            file: None,
            offset: None,
            expected: expected.into(),
        })
    }

    /// Corruption in `file` at `offset` (when known).
    pub fn corruption_at(
        file: impl Into<PathBuf>,
        offset: Option<u64>,
        expected: impl Into<String>,
    ) -> Error {
        Error::Corruption(Corruption {
            file: Some(file.into()),
            offset,
            expected: expected.into(),
        })
    }

    /// Fills in the file (and offset) of a corruption that lacks them;
    /// other errors are returned unchanged.
    pub fn with_location(self, file: &Path, offset: Option<u64>) -> Error {
        match self {
            Error::Corruption(mut c) => {
                if c.file.is_none() {
                    c.file = Some(file.to_path_buf());
                    if c.offset.is_none() {
                        c.offset = offset;
                    }
                }
                Error::Corruption(c)
            }
            e => e,
        }
    }

    /// The location and expectation of a corruption.
    pub fn corruption_info(&self) -> Option<&Corruption> {
        match self {
            Error::Corruption(c) => Some(c),
            _ => None,
        }
    }

    /// The caller passed something that is refused; nothing was changed.
    pub fn invalid(msg: impl Into<String>) -> Error {
        Error::InvalidArgument(msg.into())
    }

    /// True for [`Error::Corruption`].
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { context, source } => write!(f, "I/O error: {context}: {source}"),
            Error::Corruption(c) => write!(f, "corruption: {c}"),
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::NotFound(m) => write!(f, "not found: {m}"),
            Error::Locked(m) => write!(f, "database locked: {m}"),
            Error::Background(m) => {
                write!(f, "database is read-only after a background error: {m}")
            }
            Error::Closed => write!(f, "database is closed"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl Clone for Error {
    fn clone(&self) -> Self {
        match self {
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corruption(c) => Error::Corruption(c.clone()),
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::NotFound(m) => Error::NotFound(m.clone()),
            Error::Locked(m) => Error::Locked(m.clone()),
            Error::Background(m) => Error::Background(m.clone()),
            Error::Closed => Error::Closed,
        }
    }
}

/// Attaches context to `std::io::Result`s: `file.read(..).ctx(|| format!(..))?`.
pub trait IoContext<T> {
    /// Context from `f`, called only on error.
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T>;
    /// Context "`op` `path`".
    fn path_ctx(self, op: &str, path: &Path) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn ctx<F: FnOnce() -> String>(self, f: F) -> Result<T> {
        self.map_err(|e| Error::io(f(), e))
    }

    fn path_ctx(self, op: &str, path: &Path) -> Result<T> {
        self.map_err(|e| Error::io(format!("{op} {}", path.display()), e))
    }
}
