//! `GET /`: the version document, served without authentication.

use super::microversion::{Microversion, MAX, MIN};
use super::respond::Reply;
use serde_json::json;

/// The version document.
pub async fn home(mv: Microversion) -> Reply {
    Reply::ok(&json!({"versions": [{
        "id": "v1.0",
        "max_version": MAX.to_string(),
        "min_version": MIN.to_string(),
        "status": "CURRENT",
        "links": [{"rel": "self", "href": ""}]
    }]}))
    .cache(mv, None)
}
