//! Token validation against Keystone's v3 API, as keystonemiddleware's
//! auth_token does it: the service authenticates as its own user, then
//! checks each caller's token with `GET /v3/auth/tokens` (`X-Auth-Token`:
//! the service's token, `X-Subject-Token`: the caller's). Valid tokens are
//! cached for a bounded time, never past their expiry, in bounded memory.
//! Anything short of a clear answer from Keystone is a 503: the service
//! never fails open.

use super::token_cache::TokenCache;
use crate::config::security::{Secret, SecurityArgs};
use crate::policy::Credentials;
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::json;
use std::time::{Duration, Instant};

/// Tokens longer than this are refused without asking Keystone (a Fernet
/// token is under 300 bytes; a PKI one, long gone, a few KiB).
const MAX_TOKEN_BYTES: usize = 8192;

/// The service's own token is renewed this long before it expires.
const RENEW_BEFORE: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// Why a token was not accepted.
#[derive(Debug)]
pub enum Rejection {
    /// Missing, malformed, expired or revoked: 401.
    Invalid,
    /// Keystone could not answer: 503.
    Unavailable(String),
}

/// The service user Keystone knows this service by.
#[derive(Debug, Clone)]
struct ServiceUser {
    username: String,
    password: Secret,
    project: String,
    user_domain: Domain,
    project_domain: Domain,
}

/// A Keystone domain as the service user's options name it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Domain {
    Id(String),
    Name(String),
}

impl Domain {
    /// By id when one is given (kolla-ansible and openstack-ansible write
    /// `*_domain_id = default`), else by name.
    fn of(id: &Option<String>, name: &str) -> Domain {
        match id.as_deref().map(str::trim) {
            Some(id) if !id.is_empty() => Domain::Id(id.to_string()),
            _ => Domain::Name(name.to_string()),
        }
    }

    /// The `domain` object of an authentication request.
    fn body(&self) -> serde_json::Value {
        match self {
            Domain::Id(id) => json!({ "id": id }),
            Domain::Name(name) => json!({ "name": name }),
        }
    }
}

#[derive(Debug, Clone)]
struct ServiceToken {
    token: String,
    expires_at: DateTime<Utc>,
}

/// Validates tokens with one Keystone.
#[derive(Debug)]
pub struct Keystone {
    http: reqwest::Client,
    /// The v3 endpoint, without a trailing slash.
    url: String,
    /// What 401s point clients to.
    pub identity_uri: String,
    user: ServiceUser,
    service_token: tokio::sync::Mutex<Option<ServiceToken>>,
    cache: TokenCache,
    /// Tokens Keystone refused, not asked about again for a while (as
    /// keystonemiddleware caches invalid tokens).
    refused: TokenCache<()>,
}

impl Keystone {
    /// A validator from the `--keystone-*` options; an error names the
    /// missing option.
    pub fn from_args(a: &SecurityArgs) -> Result<Self, String> {
        let need = |v: &Option<String>, flag: &str| {
            v.clone()
                .filter(|s| !s.trim().is_empty())
                .ok_or_else(|| format!("Keystone authentication needs {flag}"))
        };
        let url = need(
            &a.keystone_url,
            "[keystone_authtoken] auth_url (or --keystone-url, PLACEMENT_KEYSTONE_URL)",
        )?;
        let url = url.trim_end_matches('/').to_string();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!(
                "[keystone_authtoken] auth_url (--keystone-url) must be an http(s) URL, not {url}"
            ));
        }
        let password = a
            .keystone_password
            .clone()
            .filter(|p| !p.expose().is_empty())
            .ok_or("Keystone authentication needs [keystone_authtoken] password (or PLACEMENT_KEYSTONE_PASSWORD, --keystone-password)")?;
        let user = ServiceUser {
            username: need(
                &a.keystone_username,
                "[keystone_authtoken] username (or --keystone-username, PLACEMENT_KEYSTONE_USERNAME)",
            )?,
            password,
            project: need(
                &a.keystone_project,
                "[keystone_authtoken] project_name (or --keystone-project, PLACEMENT_KEYSTONE_PROJECT)",
            )?,
            user_domain: Domain::of(&a.keystone_user_domain_id, &a.keystone_user_domain),
            project_domain: Domain::of(&a.keystone_project_domain_id, &a.keystone_project_domain),
        };
        let http = http_client(a, &url)?;
        let identity_uri = match &a.keystone_www_authenticate_uri {
            Some(uri) if !uri.trim().is_empty() => uri.trim().trim_end_matches('/').to_string(),
            _ => url.strip_suffix("/v3").unwrap_or(&url).to_string(),
        };
        let size = usize::try_from(a.keystone_token_cache_size).unwrap_or(usize::MAX);
        Ok(Keystone {
            http,
            identity_uri,
            url,
            user,
            service_token: tokio::sync::Mutex::new(None),
            cache: TokenCache::new(size, Duration::from_secs(a.keystone_token_cache_seconds)),
            refused: TokenCache::new(
                size,
                Duration::from_secs(a.keystone_invalid_token_cache_seconds),
            ),
        })
    }

    /// The caller behind `token`, from the cache or from Keystone.
    pub async fn validate(&self, token: &str) -> Result<Credentials, Rejection> {
        if token.is_empty()
            || token.len() > MAX_TOKEN_BYTES
            || !token.bytes().all(|b| b.is_ascii_graphic())
        {
            return Err(Rejection::Invalid);
        }
        if let Some(c) = self.cache.get(token) {
            return Ok(c);
        }
        if self.refused.get(token).is_some() {
            return Err(Rejection::Invalid);
        }
        let answer = self.ask(token).await;
        if matches!(answer, Err(Rejection::Invalid)) {
            // A refusal is final for the token: keep it (never past the
            // lifetime, which the expiry below does not shorten).
            let far = Instant::now() + Duration::from_secs(86_400);
            self.refused.put(token, (), far);
        }
        answer
    }

    /// Keystone's answer for `token` (cached when valid).
    async fn ask(&self, token: &str) -> Result<Credentials, Rejection> {
        let mut renewed = false;
        loop {
            let service = self.service_token(renewed).await?;
            let resp = self
                .http
                .get(format!("{}/auth/tokens", self.url))
                .header("X-Auth-Token", &service)
                .header("X-Subject-Token", token)
                .send()
                .await
                .map_err(|e| unavailable("validating a token", e))?;
            match resp.status().as_u16() {
                200 => {
                    let body: TokenBody = resp
                        .json()
                        .await
                        .map_err(|e| unavailable("reading Keystone's answer", e))?;
                    let (creds, expires_at) = body.token.credentials();
                    let left = (expires_at - Utc::now()).to_std().unwrap_or_default();
                    if left.is_zero() {
                        return Err(Rejection::Invalid);
                    }
                    self.cache.put(token, creds.clone(), Instant::now() + left);
                    return Ok(creds);
                }
                400 | 404 => return Err(Rejection::Invalid),
                // The service's own token expired or was revoked: once.
                401 if !renewed => renewed = true,
                s => {
                    return Err(Rejection::Unavailable(format!(
                    "Keystone answered {s} to a token validation (check the service user's role)"
                )))
                }
            }
        }
    }

    /// The service's own token, fetched when missing, close to expiry, or
    /// `renew` (Keystone refused the one held).
    async fn service_token(&self, renew: bool) -> Result<String, Rejection> {
        let mut held = self.service_token.lock().await;
        if let Some(t) = held.as_ref() {
            if !renew && t.expires_at - Utc::now() > RENEW_BEFORE {
                return Ok(t.token.clone());
            }
        }
        let fresh = self.authenticate().await?;
        let token = fresh.token.clone();
        *held = Some(fresh);
        Ok(token)
    }

    async fn authenticate(&self) -> Result<ServiceToken, Rejection> {
        let u = &self.user;
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": u.username, "domain": u.user_domain.body(),
                "password": u.password.expose()}}},
            "scope": {"project": {"name": u.project, "domain": u.project_domain.body()}}}});
        let resp = self
            .http
            .post(format!("{}/auth/tokens", self.url))
            .json(&body)
            .send()
            .await
            .map_err(|e| unavailable("authenticating the service user", e))?;
        let status = resp.status().as_u16();
        if status != 201 {
            return Err(Rejection::Unavailable(format!(
                "Keystone answered {status} to the service user {} (check [keystone_authtoken] username, password, project_name and the domains, or their --keystone-* flags)",
                u.username
            )));
        }
        let token = resp
            .headers()
            .get("x-subject-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .ok_or_else(|| Rejection::Unavailable("Keystone gave no X-Subject-Token".into()))?;
        let body: TokenBody = resp
            .json()
            .await
            .map_err(|e| unavailable("reading the service token", e))?;
        Ok(ServiceToken {
            token,
            expires_at: body.token.expires_at,
        })
    }
}

/// The client that talks to Keystone: bounded in time, with the
/// authorities of `--keystone-cafile` for an https Keystone, or none
/// checked under `--keystone-insecure` (warned).
fn http_client(a: &SecurityArgs, url: &str) -> Result<reqwest::Client, String> {
    let mut http = reqwest::Client::builder()
        .timeout(Duration::from_secs(a.keystone_timeout))
        .connect_timeout(Duration::from_secs(a.keystone_timeout.min(3)));
    let cafile = match &a.keystone_cafile {
        Some(path) if !url.starts_with("https://") => {
            tracing::warn!(
                "[keystone_authtoken] cafile {} is not used: Keystone's URL is not https",
                path.display()
            );
            None
        }
        other => other.as_ref(),
    };
    if let Some(path) = cafile {
        let pem = std::fs::read(path)
            .map_err(|e| format!("--keystone-cafile {}: {e}", path.display()))?;
        let authorities = reqwest::Certificate::from_pem_bundle(&pem)
            .map_err(|e| format!("--keystone-cafile {}: {e}", path.display()))?;
        if authorities.is_empty() {
            return Err(format!(
                "--keystone-cafile {}: no PEM certificate in it",
                path.display()
            ));
        }
        for authority in authorities {
            http = http.add_root_certificate(authority);
        }
    }
    if a.keystone_insecure {
        tracing::warn!("--keystone-insecure: Keystone's certificate is not checked; anyone between this server and Keystone can answer for it");
        http = http.danger_accept_invalid_certs(true);
    }
    http.build().map_err(|e| format!("HTTP client: {e}"))
}

fn unavailable(what: &str, e: reqwest::Error) -> Rejection {
    // reqwest's errors name the URL, never a header or the body.
    Rejection::Unavailable(format!("{what}: {e}"))
}

#[derive(Debug, Deserialize)]
struct TokenBody {
    token: Token,
}

/// The parts of a v3 token this service reads.
#[derive(Debug, Deserialize)]
struct Token {
    expires_at: DateTime<Utc>,
    #[serde(default)]
    user: Option<Named>,
    #[serde(default)]
    project: Option<Named>,
    #[serde(default)]
    domain: Option<Named>,
    #[serde(default)]
    roles: Vec<Named>,
    #[serde(default)]
    system: Option<System>,
}

#[derive(Debug, Deserialize)]
struct Named {
    #[serde(default)]
    id: String,
    #[serde(default)]
    name: String,
}

#[derive(Debug, Deserialize)]
struct System {
    #[serde(default)]
    all: bool,
}

impl Token {
    fn credentials(self) -> (Credentials, DateTime<Utc>) {
        let creds = Credentials {
            user_id: self.user.map(|u| u.id).unwrap_or_default(),
            project_id: self.project.map(|p| p.id),
            domain_id: self.domain.map(|d| d.id),
            roles: self
                .roles
                .into_iter()
                .map(|r| r.name.to_lowercase())
                .collect(),
            system_scope: self.system.filter(|s| s.all).map(|_| "all".to_string()),
        };
        (creds, self.expires_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v3_token_gives_credentials() {
        let body: TokenBody = serde_json::from_value(json!({"token": {
            "expires_at": "2030-01-01T00:00:00.000000Z",
            "user": {"id": "u1", "name": "alice", "domain": {"id": "default"}},
            "project": {"id": "p1", "name": "demo", "domain": {"id": "default"}},
            "roles": [{"id": "r1", "name": "Member"}, {"id": "r2", "name": "reader"}],
            "catalog": []}}))
        .expect("parses");
        let (c, _) = body.token.credentials();
        assert_eq!(c.user_id, "u1");
        assert_eq!(c.project_id.as_deref(), Some("p1"));
        assert_eq!(c.roles, vec!["member", "reader"]);
        assert_eq!(c.system_scope, None);
        let system: TokenBody = serde_json::from_value(json!({"token": {
            "expires_at": "2030-01-01T00:00:00Z", "user": {"id": "u2"},
            "system": {"all": true}, "roles": [{"name": "admin"}]}}))
        .expect("parses");
        let (c, _) = system.token.credentials();
        assert_eq!(c.system_scope.as_deref(), Some("all"));
        assert_eq!(c.project_id, None);
    }
}
