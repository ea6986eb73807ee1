//! The microversion list and negotiation (`OpenStack-API-Version: placement X.Y`).
//!
//! One line per version says what it changed; handlers ask
//! `mv.at_least(1, 14)` rather than compare numbers by hand.

use crate::candidates::query_grammar::LATEST;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;
use std::fmt;

/// A negotiated microversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Microversion {
    /// Major part (always 1).
    pub major: u16,
    /// Minor part.
    pub minor: u16,
}

/// The oldest version served.
pub const MIN: Microversion = Microversion { major: 1, minor: 0 };
/// The newest version served (`latest`).
pub const MAX: Microversion = Microversion {
    major: LATEST.major,
    minor: LATEST.minor,
};

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
    /// The same version as the candidate engine takes it.
    pub fn engine(self) -> crate::candidates::query_grammar::Version {
        crate::candidates::query_grammar::Version::new(self.major, self.minor)
    }

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

/// Negotiates the version from the request headers. Only the standard
/// header is read (the legacy one is ignored, as the reference does); the last
/// `placement` entry wins.
pub fn negotiate(headers: &HeaderMap) -> Result<Microversion, VersionRefusal> {
    let mut chosen: Option<String> = None;
    for value in headers.get_all("openstack-api-version") {
        let Ok(text) = value.to_str() else {
            return Err(VersionRefusal::Invalid(
                "Invalid microversion: the OpenStack-API-Version header is not valid text".into(),
            ));
        };
        for entry in text.split(',') {
            let mut parts = entry.trim().splitn(2, char::is_whitespace);
            let service = parts.next().unwrap_or("");
            if let Some(version) = parts.next() {
                if service.eq_ignore_ascii_case("placement") {
                    chosen = Some(version.trim().to_string());
                }
            }
        }
    }
    let Some(raw) = chosen else { return Ok(MIN) };
    if raw == "latest" {
        return Ok(MAX);
    }
    let parsed = raw.split_once('.').and_then(|(a, b)| {
        Some(Microversion::new(
            a.trim().parse().ok()?,
            b.trim().parse().ok()?,
        ))
    });
    match parsed {
        None => Err(VersionRefusal::Invalid(format!(
            "Invalid microversion: invalid version string: {raw}"
        ))),
        Some(v) if v < MIN || v > MAX => Err(VersionRefusal::Unacceptable(raw)),
        Some(v) => Ok(v),
    }
}

/// Why a request's microversion cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRefusal {
    /// The header does not parse (400, with this message).
    Invalid(String),
    /// A version outside MIN..=MAX (406, with the bounds).
    Unacceptable(String),
}

impl<S: Send + Sync> FromRequestParts<S> for Microversion {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<Microversion>()
            .copied()
            .unwrap_or(MIN))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn neg(v: &str) -> Result<Microversion, u16> {
        let mut h = HeaderMap::new();
        h.insert("openstack-api-version", HeaderValue::from_str(v).unwrap());
        negotiate(&h).map_err(|e| match e {
            VersionRefusal::Invalid(_) => 400,
            VersionRefusal::Unacceptable(_) => 406,
        })
    }

    #[test]
    fn parses_and_bounds() {
        assert_eq!(neg("placement 1.02").unwrap(), Microversion::new(1, 2));
        assert_eq!(neg("placement latest").unwrap(), MAX);
        assert_eq!(
            neg("compute 2.1, placement 1.14").unwrap(),
            Microversion::new(1, 14)
        );
        assert_eq!(neg("placement pony.horse").unwrap_err(), 400);
        assert_eq!(neg("placement 1.2.3").unwrap_err(), 400);
        assert_eq!(neg("placement LATEST").unwrap_err(), 400);
        assert_eq!(neg("placement 1.40").unwrap_err(), 406);
        assert_eq!(neg("placement 0.5").unwrap_err(), 406);
        assert_eq!(negotiate(&HeaderMap::new()).unwrap(), MIN);
        let mut h = HeaderMap::new();
        h.insert(
            "openstack-api-version",
            HeaderValue::from_bytes(b"placement 1.\xff").unwrap(),
        );
        assert!(matches!(negotiate(&h), Err(VersionRefusal::Invalid(_))));
        assert_eq!(HISTORY.len(), MAX.minor as usize + 1);
    }
}
