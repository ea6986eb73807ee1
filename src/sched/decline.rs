//! Decline ("refuse") filters of the Mesos allocator (`RefusedOfferFilter`,
//! `Filters.refuse_seconds` in `mesos.proto`). Pure.
//!
//! - the duration defaults to 5 s, a negative one falls back to 5 s, 0
//!   installs no filter, and more than 365 days is clamped to 365 days;
//! - a filter lives at least one allocation interval;
//! - it hides a later offer only while the refused resources contain it:
//!   when more becomes free, the provider is offered again.

use super::drf::Resources;

/// `refuse_seconds` when the client gives none.
pub const DEFAULT_REFUSE_SECONDS: f64 = 5.0;

/// The longest filter: 365 days.
pub const MAX_REFUSE_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// How long a decline hides the provider, or None for no filter.
pub fn filter_seconds(refuse_seconds: Option<f64>, allocation_interval: f64) -> Option<f64> {
    let asked = match refuse_seconds {
        None => DEFAULT_REFUSE_SECONDS,
        Some(0.0) => return None,
        Some(s) if s.is_nan() || s < 0.0 => DEFAULT_REFUSE_SECONDS,
        Some(s) => s.min(MAX_REFUSE_SECONDS),
    };
    Some(asked.max(allocation_interval))
}

/// True when a filter on `refused` hides an offer of `offered`: every
/// resource offered was refused in at least that amount.
pub fn hides(refused: &Resources, offered: &Resources) -> bool {
    offered
        .iter()
        .all(|(r, q)| refused.get(r).is_some_and(|have| have >= q))
}
