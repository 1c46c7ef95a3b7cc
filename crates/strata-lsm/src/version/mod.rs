//! Versions: the set of live table files per level, the MANIFEST that
//! records changes to it, and the reference counting that keeps a file alive
//! while any reader still uses a version holding it.
//!
//! A [`Version`] is immutable and shared through `Arc`; installing a change
//! creates a new one. [`VersionSet`] owns the current version, the MANIFEST
//! writer and the file-number and sequence counters, and remembers every
//! version still referenced so that obsolete-file deletion never removes a
//! file a reader can still reach.

pub mod edit;
pub mod ext;
mod release;
mod set;
#[allow(clippy::module_inception)]
mod version;

pub use edit::{FileMetaData, VersionEdit};
pub use ext::VersionExtension;
pub use release::ReleaseSignal;
pub use set::{Recovered, VersionSet};
pub use version::{LevelIter, Version};
