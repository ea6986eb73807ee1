//! Request extractors whose rejections are [`ApiError`]s, so that malformed
//! bodies and paths get Placement's error format, and the body-validation
//! helpers every write handler uses.

use super::schema::validate::{integers_as_integers, validate};
use crate::api::respond::{ApiError, ApiResult};
use crate::db::providers::{self, ProviderRow};
use crate::types::parse_uuid_like;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sqlx::PgConnection;

/// A JSON request body: `Content-Type: application/json` required (415
/// otherwise), parsed but not yet validated.
pub struct JsonBody(pub Value);

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let ctype = req
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or("").to_string());
        let media = ctype.as_deref().map(|c| {
            c.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
        if media.as_deref() != Some("application/json") {
            return Err(ApiError::unsupported_media(ctype.as_deref()));
        }
        let bytes = axum::body::Bytes::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("Malformed JSON: {e}")))?;
        let value: Value = serde_json::from_slice(&bytes)
            .map_err(|e| ApiError::bad_request(format!("Malformed JSON: {e}")))?;
        if has_nul(&value) {
            return Err(ApiError::bad_request(
                "JSON does not validate: strings may not contain NUL characters",
            ));
        }
        Ok(JsonBody(value))
    }
}

impl JsonBody {
    /// Validates against `schema` (400 `JSON does not validate: ...`) and
    /// deserialises into `T`.
    pub fn parse<T: DeserializeOwned>(self, schema: &Value) -> Result<T, ApiError> {
        validate(schema, &self.0).map_err(|e| {
            ApiError::bad_request(format!("JSON does not validate: {}", e.render()))
        })?;
        let mut body = self.0;
        integers_as_integers(schema, &mut body);
        serde_json::from_value(body)
            .map_err(|e| ApiError::bad_request(format!("JSON does not validate: {e}")))
    }
}

impl JsonBody {
    /// As `parse`, for an extension's body: a refusal is short, names the
    /// offending field and where it is, and carries the stable code
    /// `placement.body.invalid` (Placement's texts print the whole schema,
    /// which for these bodies says nothing a caller can act on). Where the
    /// schema is a choice of shapes (`anyOf`: a queue submission alone or
    /// a list of them), the shape whose required fields the body has is the one
    /// reported against.
    pub fn parse_extension<T: DeserializeOwned>(self, schema: &Value) -> Result<T, ApiError> {
        let invalid = |what: String| {
            ApiError::bad_request(format!("Invalid body: {what}"))
                .code(crate::error::codes::BODY_INVALID)
        };
        if let Err(e) = validate(schema, &self.0) {
            let meant = schema
                .get("anyOf")
                .and_then(Value::as_array)
                .and_then(|shapes| shapes.iter().find(|s| has_required(s, &self.0)));
            let e = meant.and_then(|s| validate(s, &self.0).err()).unwrap_or(e);
            let at = e.pointer();
            return Err(invalid(if at.is_empty() {
                e.message.clone()
            } else {
                format!("{} (at {at})", e.message)
            }));
        }
        let mut body = self.0;
        integers_as_integers(schema, &mut body);
        serde_json::from_value(body).map_err(|e| invalid(e.to_string()))
    }
}

/// Whether `body` has every field `schema` requires.
fn has_required(schema: &Value, body: &Value) -> bool {
    schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|keys| {
            keys.iter()
                .filter_map(Value::as_str)
                .all(|k| body.get(k).is_some())
        })
}

/// A project id a write takes from its path and stores: held to the rule
/// of a body's project id (`project_id_schema`: 1 to 255 characters), 400
/// otherwise, so that no project is stored that no body could name.
pub fn stored_project_id(raw: &str) -> Result<(), ApiError> {
    validate(
        &super::schema::extensions::project_id_schema(),
        &Value::String(raw.to_string()),
    )
    .map_err(|e| ApiError::bad_request(format!("Invalid project_id in path: {}", e.render())))
}

/// True when any string (or key) in the value holds a NUL character, which
/// PostgreSQL text cannot store.
fn has_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(a) => a.iter().any(has_nul),
        Value::Object(m) => m.iter().any(|(k, v)| k.contains('\0') || has_nul(v)),
        _ => false,
    }
}

/// The query string as ordered (key, value) pairs, repeats kept. It is
/// parsed once per request, by the route guard (whose policy target reads
/// it) and left in the request's extensions, where this extractor takes
/// the same value for the handler.
#[derive(Debug, Clone, Default)]
pub struct QueryPairs(pub Vec<(String, String)>);

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let pairs = match parts.extensions.get::<QueryPairs>() {
            Some(q) => q.clone(),
            None => QueryPairs::parse(parts.uri.query()),
        };
        if pairs
            .0
            .iter()
            .any(|(k, v)| k.contains('\0') || v.contains('\0'))
        {
            return Err(ApiError::bad_request(
                "Invalid query string parameters: values may not contain NUL characters",
            ));
        }
        Ok(pairs)
    }
}

impl QueryPairs {
    /// Splits a raw query string (percent-decoded, `+` as space).
    pub fn parse(query: Option<&str>) -> Self {
        QueryPairs(
            form_urlencoded::parse(query.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    /// The last value of `key`: the value of a single-valued parameter.
    pub fn last(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`, in order.
    pub fn all(&self, key: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The flat `{key: last value}` object Placement validates query strings as.
    pub fn flat(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in &self.0 {
            m.insert(k.clone(), Value::String(v.clone()));
        }
        Value::Object(m)
    }

    /// Validates a query whose every key is single-valued (see
    /// [`Self::validate_repeating`]).
    pub fn validate(&self, schema: &Value) -> Result<(), ApiError> {
        self.validate_repeating(schema, |_| false)
    }

    /// Validates the flat view (400 `Invalid query string parameters: ...`)
    /// and, for a single-valued key given more than once, each of its other
    /// values too: whichever value is used, it was validated. A key for
    /// which `repeats` holds may be given several times, each value
    /// counting (a request group's filters); the query's declaration beside
    /// its schema says which (every other key's last value is the one
    /// used, as WebOb's `GET.get` reads it).
    pub fn validate_repeating(
        &self,
        schema: &Value,
        repeats: fn(&str) -> bool,
    ) -> Result<(), ApiError> {
        let invalid = |e: Box<super::schema::validate::SchemaError>| {
            ApiError::bad_request(format!("Invalid query string parameters: {}", e.render()))
        };
        let flat = self.flat();
        validate(schema, &flat).map_err(invalid)?;
        for (i, (key, value)) in self.0.iter().enumerate() {
            let is_last = !self.0[i + 1..].iter().any(|(k, _)| k == key);
            if is_last || repeats(key) {
                continue;
            }
            let mut other = flat.clone();
            other[key.as_str()] = Value::String(value.clone());
            validate(schema, &other).map_err(invalid)?;
        }
        Ok(())
    }

    /// Validates a Placement query that also takes this service's
    /// extension parameters: those named by `extension`'s properties are
    /// checked against it, the rest against Placement's `schema`, so that
    /// a Placement client's errors print Placement's schema alone.
    pub fn validate_with_extension(
        &self,
        schema: &Value,
        repeats: fn(&str) -> bool,
        extension: &Value,
    ) -> Result<(), ApiError> {
        let ours = |k: &str| extension["properties"].get(k).is_some();
        let (mine, theirs): (Vec<_>, Vec<_>) = self.0.iter().cloned().partition(|(k, _)| ours(k));
        QueryPairs(theirs).validate_repeating(schema, repeats)?;
        QueryPairs(mine).validate(extension)
    }

    /// Validates (as [`Self::validate`]) and reads the parameters into `T`,
    /// from the same flat view the schema checked.
    pub fn typed<T: DeserializeOwned>(&self, schema: &Value) -> Result<T, ApiError> {
        self.validate(schema)?;
        serde_json::from_value(self.flat())
            .map_err(|e| ApiError::bad_request(format!("Invalid query string parameters: {e}")))
    }
}

/// How a route words the 404 of a provider that does not exist: each of
/// Placement's handlers wraps the lookup's own message its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The lookup's message alone.
    Plain,
    /// `GET .../inventories[/{rc}]`: `No resource provider with uuid U found : …`.
    Inventories,
    /// `GET .../allocations`: `Resource provider 'U' not found: …`.
    Allocations,
    /// `GET .../traits` and `.../usages`: `No resource provider with uuid U found: …`.
    TraitsOrUsages,
}

impl Missing {
    fn error(self, raw: &str) -> ApiError {
        let plain = format!("No resource provider with uuid {raw} found");
        ApiError::not_found(match self {
            Missing::Plain => plain,
            Missing::Inventories => format!("{plain} : {plain}"),
            Missing::Allocations => format!("Resource provider '{raw}' not found: {plain}"),
            Missing::TraitsOrUsages => format!("{plain}: {plain}"),
        })
    }
}

/// Loads the provider named in a path, or 404 `No resource provider with uuid <u> found`.
pub async fn find(conn: &mut PgConnection, raw: &str) -> ApiResult<ProviderRow> {
    find_or(conn, raw, Missing::Plain).await
}

/// Loads the provider named in a path, or the route's 404.
pub async fn find_or(
    conn: &mut PgConnection,
    raw: &str,
    missing: Missing,
) -> ApiResult<ProviderRow> {
    let row = match parse_uuid_like(raw) {
        Some(u) => providers::get(conn, u).await?,
        None => None,
    };
    row.ok_or_else(|| missing.error(raw))
}

/// Like [`find`], locking the row for the rest of the transaction.
pub async fn find_for_update(conn: &mut PgConnection, raw: &str) -> ApiResult<ProviderRow> {
    let row = match parse_uuid_like(raw) {
        Some(u) => providers::get_for_update(conn, u).await?,
        None => None,
    };
    row.ok_or_else(|| Missing::Plain.error(raw))
}

/// Path parameters; a path that cannot be decoded is simply not found.
pub struct PathParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for PathParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        if parts.uri.path().contains("%00") {
            return Err(ApiError::not_found(""));
        }
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| PathParams(p.0))
            .map_err(|_| ApiError::not_found(""))
    }
}
