//! What a version install tells the extensions, and the state they carry
//! in each version (see `hooks`, points 3 and 7). The version set knows
//! extensions only through [`VersionExtension`].

use std::any::Any;
use std::sync::Arc;

use crate::error::Result;
use crate::version::FileMetaData;

/// Why a version is being installed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallReason {
    /// A memtable flush added an L0 table.
    Flush,
    /// A compaction replaced its inputs by its outputs.
    Compaction,
    /// Tables added by a caller outside flush/compaction (not used yet).
    External,
}

/// The change being installed.
#[derive(Debug)]
pub struct InstallEvent<'a> {
    /// Why the version changes.
    pub reason: InstallReason,
    /// (level, file) pairs added.
    pub added: &'a [(usize, Arc<FileMetaData>)],
    /// (level, file number) pairs removed.
    pub removed: &'a [(usize, u64)],
    /// The extension's state in the version being replaced.
    pub previous: Option<&'a ExtState>,
}

/// Immutable extension state carried by a version.
pub type ExtState = Arc<dyn Any + Send + Sync>;

/// What an install hook contributes to the new version.
#[derive(Default)]
pub struct InstallOutcome {
    /// Appended to the same manifest record as the file changes.
    pub payload: Option<Vec<u8>>,
    /// The extension's state in the new version (`None` keeps the previous).
    pub state: Option<ExtState>,
}

/// The part of an extension the version set calls: at every install and
/// at recovery (see `hooks::EngineHooks`, which presents every extension
/// this way).
pub trait VersionExtension: Send + Sync {
    /// Unique name; payloads are stored under it in the manifest.
    fn name(&self) -> &str;

    /// Called under the version lock before the new version's MANIFEST
    /// record is written; returns the extension's state for that version.
    fn on_install(&self, event: &InstallEvent<'_>) -> Result<InstallOutcome>;

    /// Rebuilds the extension state at open from the payloads this
    /// extension wrote, oldest first, and the live files of the recovered
    /// version.
    fn on_recover(
        &self,
        payloads: &[Vec<u8>],
        files: &[(usize, Arc<FileMetaData>)],
    ) -> Result<Option<ExtState>>;
}
