//! The agent's client of the service: one request at a time with the
//! token the agent holds, Placement's error body read into a clear
//! error, typed bodies both ways.

use super::keystone::Keystone;
use crate::config::agent_conf::KeystoneCredentials;
use serde::{Deserialize, Serialize};

/// The microversion the agent speaks (re-parenting needs 1.37).
const MICROVERSION: &str = "placement 1.39";
/// The service's address without a flag, a variable or a catalog.
const DEFAULT_URL: &str = "http://127.0.0.1:8778";
/// Tries of one write against a moving generation.
pub const CONFLICT_TRIES: usize = 5;

/// Why a sync stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("the placement service at {0}: {1}")]
    Unreachable(String, String),
    #[error("{method} {path}: {status}: {detail}")]
    Refused {
        method: String,
        path: String,
        status: u16,
        detail: String,
    },
    #[error("{0}: the generation kept moving ({CONFLICT_TRIES} tries)")]
    Conflict(String),
}

/// Who the agent is to the service.
pub enum Identity {
    /// A token given as it is (`PLACEMENT_TOKEN`, noauth2).
    Token(String),
    /// Keystone, from `[placement]`'s credentials.
    Keystone(Box<Keystone>),
}

/// The service and the identity the agent presents.
pub struct Service {
    http: reqwest::Client,
    /// The flag's or variable's address (None: the catalog's, or the default).
    base: Option<String>,
    identity: Identity,
}

/// `GET /resource_providers?name=…`.
#[derive(Deserialize)]
struct ProviderList {
    resource_providers: Vec<ProviderWire>,
}

/// A provider found by name.
#[derive(Deserialize)]
pub struct ProviderWire {
    pub uuid: String,
    pub parent_provider_uuid: Option<String>,
}

/// Placement's error body.
#[derive(Deserialize)]
struct ErrorsWire {
    errors: Vec<ErrorWire>,
}

#[derive(Deserialize)]
struct ErrorWire {
    detail: String,
}

impl Service {
    /// The service at `base` (None: Keystone's catalog, looked up at the
    /// first request, else 127.0.0.1:8778), as `identity`.
    pub fn new(
        base: Option<&str>,
        token: String,
        creds: Option<KeystoneCredentials>,
    ) -> Result<Service, ServiceError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| ServiceError::Unreachable("the HTTP client".into(), e.to_string()))?;
        let identity = match creds {
            Some(c) => Identity::Keystone(Box::new(Keystone::new(http.clone(), c))),
            None => Identity::Token(token),
        };
        Ok(Service {
            http,
            base: base.map(|b| b.trim_end_matches('/').to_string()),
            identity,
        })
    }

    /// Where the service is.
    async fn base(&self) -> Result<String, ServiceError> {
        match (&self.base, &self.identity) {
            (Some(b), _) => Ok(b.clone()),
            (None, Identity::Keystone(k)) => {
                Ok(k.endpoint().await?.trim_end_matches('/').to_string())
            }
            (None, Identity::Token(_)) => Ok(DEFAULT_URL.to_string()),
        }
    }

    /// One request; the status and the body's text. Behind Keystone a
    /// 401 gets a new token and one more try.
    pub async fn call<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<(u16, String), ServiceError> {
        let (status, text) = self.once(method.clone(), path, body).await?;
        match &self.identity {
            Identity::Keystone(k) if status == 401 => {
                k.forget().await;
                self.once(method, path, body).await
            }
            _ => Ok((status, text)),
        }
    }

    async fn once<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<(u16, String), ServiceError> {
        let token = match &self.identity {
            Identity::Token(t) => t.clone(),
            Identity::Keystone(k) => k.token().await?,
        };
        let base = self.base().await?;
        let mut rb = self
            .http
            .request(method, format!("{base}{path}"))
            .header("x-auth-token", token)
            .header("openstack-api-version", MICROVERSION)
            .header("accept", "application/json");
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let r = rb
            .send()
            .await
            .map_err(|e| ServiceError::Unreachable(base.clone(), e.to_string()))?;
        let status = r.status().as_u16();
        Ok((status, r.text().await.unwrap_or_default()))
    }

    /// A request whose status must be one of `ok`.
    pub async fn expect<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
        ok: &[u16],
    ) -> Result<String, ServiceError> {
        let (status, text) = self.call(method.clone(), path, body).await?;
        if ok.contains(&status) {
            return Ok(text);
        }
        Err(refused(&method, path, status, &text))
    }

    /// A GET of a typed body.
    pub async fn read<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, ServiceError> {
        let text = self
            .expect::<()>(reqwest::Method::GET, path, None, &[200])
            .await?;
        typed("GET", path, &text)
    }

    /// A POST of a typed body, answered with a typed body.
    pub async fn post<B: Serialize, T: for<'de> Deserialize<'de>>(
        &self,
        path: &str,
        body: &B,
        ok: &[u16],
    ) -> Result<T, ServiceError> {
        let text = self
            .expect(reqwest::Method::POST, path, Some(body), ok)
            .await?;
        typed("POST", path, &text)
    }

    /// The provider of that name, if the service has one.
    pub async fn provider_named(&self, name: &str) -> Result<Option<ProviderWire>, ServiceError> {
        let query: String = form_urlencoded::Serializer::new(String::new())
            .append_pair("name", name)
            .finish();
        let found: ProviderList = self.read(&format!("/resource_providers?{query}")).await?;
        Ok(found.resource_providers.into_iter().next())
    }
}

/// An answer read as `T`, or a clear error naming the request.
fn typed<T: for<'de> Deserialize<'de>>(
    method: &str,
    path: &str,
    text: &str,
) -> Result<T, ServiceError> {
    serde_json::from_str(text).map_err(|e| ServiceError::Refused {
        method: method.into(),
        path: path.to_string(),
        status: 200,
        detail: format!("an answer this agent does not read: {e}"),
    })
}

/// A refusal, with the detail of Placement's error body.
pub fn refused(method: &reqwest::Method, path: &str, status: u16, text: &str) -> ServiceError {
    ServiceError::Refused {
        method: method.to_string(),
        path: path.to_string(),
        status,
        detail: serde_json::from_str::<ErrorsWire>(text)
            .ok()
            .and_then(|e| e.errors.into_iter().next())
            .map_or_else(|| "no detail".to_string(), |e| e.detail),
    }
}
