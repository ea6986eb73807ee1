//! Placement's microversions: the one type, the oldest and newest served
//! and what each added. The HTTP layer negotiates one per request
//! (`api::microversion`); the candidate engine and the services follow its
//! semantics (`mv.at_least(1, 29)`), never a number of their own.

use std::fmt;

/// A Placement microversion (`1.39`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Microversion {
    /// Major part (always 1).
    pub major: u16,
    /// Minor part.
    pub minor: u16,
}

/// The oldest version served.
pub const MIN: Microversion = Microversion { major: 1, minor: 0 };
/// The newest version served (`latest`): what services that ask the
/// engine themselves (deployments) use. A new microversion raises it and
/// adds its line to [`HISTORY`].
pub const LATEST: Microversion = Microversion::new(1, 39);

/// What each version added, for documentation and the OpenAPI description.
pub const HISTORY: &[(&str, &str)] = &[
    (
        "1.0",
        "providers, inventories, usages, allocations (list form)",
    ),
    ("1.1", "provider aggregates"),
    ("1.2", "custom resource classes"),
    ("1.3", "member_of on provider lists"),
    ("1.4", "resources filter on provider lists"),
    ("1.5", "DELETE all inventories"),
    ("1.6", "traits"),
    ("1.7", "PUT /resource_classes/{name} create-or-verify"),
    ("1.8", "project_id/user_id in allocations"),
    ("1.9", "GET /usages"),
    ("1.10", "GET /allocation_candidates"),
    ("1.11", "allocations link on providers"),
    ("1.12", "dict form of allocations"),
    ("1.13", "POST /allocations"),
    ("1.14", "nested providers, in_tree"),
    ("1.15", "last-modified and cache-control"),
    ("1.16", "limit on candidates"),
    ("1.17", "required traits on candidates"),
    ("1.18", "required on provider lists"),
    ("1.19", "aggregates carry the provider generation"),
    ("1.20", "POST provider returns the body"),
    ("1.21", "member_of on candidates"),
    ("1.22", "forbidden traits"),
    ("1.23", "error codes"),
    ("1.24", "repeated member_of"),
    ("1.25", "granular request groups"),
    ("1.26", "reserved may equal total"),
    ("1.27", "all classes in provider summaries"),
    ("1.28", "consumer generations"),
    ("1.29", "nested allocation candidates"),
    ("1.30", "reshaper"),
    ("1.31", "in_tree on candidates"),
    ("1.32", "forbidden aggregates"),
    ("1.33", "string group suffixes"),
    ("1.34", "mappings in allocation requests"),
    ("1.35", "root_required"),
    ("1.36", "same_subtree"),
    ("1.37", "re-parenting providers"),
    ("1.38", "consumer types"),
    ("1.39", "any-of traits in required"),
];

impl Microversion {
    /// A version from its parts.
    pub const fn new(major: u16, minor: u16) -> Self {
        Self { major, minor }
    }

    /// True when this version is `major.minor` or newer.
    pub fn at_least(self, major: u16, minor: u16) -> bool {
        self >= Self::new(major, minor)
    }
}

impl fmt::Display for Microversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every version from 1.0 to the newest says what it added, in order.
    #[test]
    fn the_history_has_a_line_per_version() {
        let listed: Vec<String> = HISTORY.iter().map(|(v, _)| v.to_string()).collect();
        let served: Vec<String> = (MIN.minor..=LATEST.minor)
            .map(|minor| Microversion::new(1, minor).to_string())
            .collect();
        assert_eq!(listed, served);
    }
}
