//! The microversion list and negotiation (`OpenStack-API-Version: placement X.Y`).
//!
//! One line per version says what it changed; handlers ask
//! `mv.at_least(1, 14)` rather than compare numbers by hand.

pub use crate::microversions::Microversion;
use crate::microversions::{LATEST, MIN};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::HeaderMap;

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
        return Ok(LATEST);
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
        Some(v) if v < MIN || v > LATEST => Err(VersionRefusal::Unacceptable(raw)),
        Some(v) => Ok(v),
    }
}

/// Why a request's microversion cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRefusal {
    /// The header does not parse (400, with this message).
    Invalid(String),
    /// A version outside MIN..=LATEST (406, with the bounds).
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
        assert_eq!(neg("placement latest").unwrap(), LATEST);
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
    }
}
