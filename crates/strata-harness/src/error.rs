//! The harness's error: an engine error, any other failure (with its
//! context in the message), or a check that failed.

use std::fmt;

/// Every failure of the harness.
#[derive(Debug)]
pub enum Error {
    /// An engine error.
    Db(strata::Error),
    /// Any other error (unreadable file, bad input, a system's failure).
    Other(String),
    /// A check failed (wrong result counts, a state no history explains);
    /// the message is complete as is.
    Failed(String),
}

impl From<strata::Error> for Error {
    fn from(e: strata::Error) -> Self {
        Error::Db(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Db(e) => write!(f, "{e}"),
            Error::Other(m) | Error::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

/// A result whose error is the harness's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;
