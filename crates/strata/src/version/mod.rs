//! Versions: the set of live table files per level, the MANIFEST that
//! records changes to it, and the reference counting that keeps a file alive
//! while any reader still uses a version holding it.

pub mod edit;

pub use edit::{FileMetaData, VersionEdit};
