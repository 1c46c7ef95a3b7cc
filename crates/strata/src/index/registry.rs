//! The registry of strategies: the one place that maps a [`StrategyKind`]
//! to its module.

use std::sync::Arc;

use strata_lsm::error::Result;

use super::strategy::{IndexStrategy, OpenCx, StrategyKind};

/// The registry: opens the strategy of `kind`, which parses and checks its
/// parameters (a clear error for an unknown or invalid one).
pub(crate) fn open(kind: StrategyKind, cx: &OpenCx<'_>) -> Result<Arc<dyn IndexStrategy>> {
    Ok(match kind {
        StrategyKind::Next => Arc::new(super::next::Next::open(cx)?),
        StrategyKind::Memory => Arc::new(super::memory::Memory::open(cx)?),
        StrategyKind::Embedded => Arc::new(super::embedded::Embedded::open(cx)?),
        StrategyKind::Composite => Arc::new(super::composite::Composite::open(cx)?),
        StrategyKind::Deli => Arc::new(super::deli::Deli::open(cx)?),
        StrategyKind::PostingEager => Arc::new(super::posting::Posting::open(cx, true)?),
        StrategyKind::PostingLazy => Arc::new(super::posting::Posting::open(cx, false)?),
        StrategyKind::Filter => Arc::new(super::filter::Filter::open(cx)?),
        StrategyKind::Perseid => Arc::new(super::perseid::Perseid::open(cx)?),
    })
}
