//! `GET /`: the version document, served without authentication.

use super::microversion::Microversion;
use super::respond::Reply;
use super::schema::responses::{Link, VersionDocument, VersionEntry};
use crate::microversions::{LATEST, MIN};

/// The version document.
pub async fn home(mv: Microversion) -> Reply {
    Reply::ok(&VersionDocument {
        versions: vec![VersionEntry {
            id: "v1.0".into(),
            max_version: LATEST.to_string(),
            min_version: MIN.to_string(),
            status: "CURRENT".into(),
            links: vec![Link::new("self", String::new())],
        }],
    })
    .cache(mv, None)
}
