//! The agent's identity behind Keystone: a project-scoped token from the
//! password credentials of `[placement]` (as nova-compute authenticates),
//! kept until five minutes before it expires or until the service refuses
//! it, and the service's endpoint from the token's catalog.

use super::service::ServiceError;
use crate::config::agent_conf::KeystoneCredentials;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;

/// A token is renewed this long before it expires.
const RENEW_BEFORE: chrono::Duration = chrono::Duration::minutes(5);

/// `POST /v3/auth/tokens`' body, as far as the agent reads it.
#[derive(Deserialize)]
struct Issued {
    token: TokenBody,
}

#[derive(Deserialize)]
struct TokenBody {
    expires_at: DateTime<Utc>,
    #[serde(default)]
    catalog: Vec<CatalogService>,
}

#[derive(Deserialize)]
struct CatalogService {
    #[serde(rename = "type")]
    kind: String,
    endpoints: Vec<CatalogEndpoint>,
}

#[derive(Deserialize)]
struct CatalogEndpoint {
    interface: String,
    #[serde(default)]
    region_id: Option<String>,
    #[serde(default)]
    region: Option<String>,
    url: String,
}

/// A token held, with the catalog it came with.
struct Held {
    token: String,
    expires_at: DateTime<Utc>,
    catalog: Vec<CatalogService>,
}

/// Keystone, as the agent's identity.
pub struct Keystone {
    http: reqwest::Client,
    creds: KeystoneCredentials,
    held: tokio::sync::Mutex<Option<Held>>,
}

fn refused(what: &str, detail: String) -> ServiceError {
    ServiceError::Refused {
        method: "POST".into(),
        path: what.into(),
        status: 401,
        detail,
    }
}

impl Keystone {
    pub fn new(http: reqwest::Client, creds: KeystoneCredentials) -> Keystone {
        Keystone {
            http,
            creds,
            held: tokio::sync::Mutex::new(None),
        }
    }

    /// A token to present: the one held, else a new one.
    pub async fn token(&self) -> Result<String, ServiceError> {
        let mut held = self.held.lock().await;
        match &*held {
            Some(h) if h.expires_at - RENEW_BEFORE > crate::clock::now() => Ok(h.token.clone()),
            _ => {
                let fresh = self.issue().await?;
                let token = fresh.token.clone();
                *held = Some(fresh);
                Ok(token)
            }
        }
    }

    /// The service refused the token: the next request gets a new one.
    pub async fn forget(&self) {
        *self.held.lock().await = None;
    }

    /// The placement endpoint: `endpoint_override`, else the catalog's
    /// of the first valid interface in the region.
    pub async fn endpoint(&self) -> Result<String, ServiceError> {
        if let Some(url) = &self.creds.endpoint_override {
            return Ok(url.clone());
        }
        self.token().await?;
        let held = self.held.lock().await;
        let catalog = held.as_ref().map_or(&[][..], |h| &h.catalog[..]);
        let endpoints: Vec<&CatalogEndpoint> = catalog
            .iter()
            .filter(|s| s.kind == "placement")
            .flat_map(|s| &s.endpoints)
            .filter(|e| {
                self.creds
                    .region_name
                    .as_ref()
                    .is_none_or(|r| e.region_id.as_ref() == Some(r) || e.region.as_ref() == Some(r))
            })
            .collect();
        self.creds
            .valid_interfaces
            .iter()
            .find_map(|i| endpoints.iter().find(|e| &e.interface == i))
            .map(|e| e.url.clone())
            .ok_or_else(|| {
                refused(
                    "the catalog",
                    format!(
                        "no placement endpoint for interfaces {:?} in region {:?}",
                        self.creds.valid_interfaces, self.creds.region_name
                    ),
                )
            })
    }

    /// Asks Keystone for a project-scoped token (the password is in the
    /// body only; an error says what Keystone answered, never the body).
    async fn issue(&self) -> Result<Held, ServiceError> {
        let c = &self.creds;
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": c.username, "domain": {"name": c.user_domain_name},
                "password": c.password.expose()}}},
            "scope": {"project": {"name": c.project_name, "domain": {"name": c.project_domain_name}}}}});
        let url = format!("{}/auth/tokens", c.auth_url);
        let r = self.http.post(&url).json(&body).send().await.map_err(|e| {
            ServiceError::Unreachable(c.auth_url.clone(), e.without_url().to_string())
        })?;
        let status = r.status().as_u16();
        if status != 201 {
            return Err(refused(
                &url,
                format!("Keystone answered {status} for user {}", c.username),
            ));
        }
        let token = r
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| refused(&url, "Keystone issued no X-Subject-Token".into()))?;
        let issued: Issued = r
            .json()
            .await
            .map_err(|e| refused(&url, format!("a token body this agent does not read: {e}")))?;
        tracing::info!(target: "placement::agent", user = %c.username, project = %c.project_name,
            expires_at = %issued.token.expires_at, "Keystone token issued");
        Ok(Held {
            token,
            expires_at: issued.token.expires_at,
            catalog: issued.token.catalog,
        })
    }
}
