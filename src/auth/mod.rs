//! Who is calling. Under `noauth2` (Placement's test and development
//! mode) the token names the user (`admin` is the administrator) and the
//! identity headers are trusted; under `keystone` every token is validated
//! by Keystone and the identity comes from its answer alone, so identity
//! headers sent by a client change nothing.

pub mod cache;
pub mod keystone;

use crate::config::security::{AuthStrategy, SecurityArgs};
use crate::error::ApiError;
use crate::policy::Credentials;
use axum::http::HeaderMap;

/// The configured way of authenticating callers.
#[derive(Debug)]
pub enum Authenticator {
    /// Placement's `noauth2`.
    NoAuth,
    /// Tokens validated by Keystone.
    Keystone(Box<keystone::Keystone>),
}

impl Authenticator {
    /// The authenticator the options ask for; an error says which option
    /// is missing or wrong.
    pub fn from_args(a: &SecurityArgs) -> Result<Self, String> {
        Ok(match a.auth_strategy {
            AuthStrategy::Noauth2 => Authenticator::NoAuth,
            AuthStrategy::Keystone => {
                Authenticator::Keystone(Box::new(keystone::Keystone::from_args(a)?))
            }
        })
    }

    /// The caller of a request: Ok(None) without a token (public paths
    /// may still answer), 401 for a token Keystone refuses, 503 when it
    /// cannot answer.
    pub async fn identify(&self, headers: &HeaderMap) -> Result<Option<Credentials>, ApiError> {
        let token = headers
            .get("x-auth-token")
            .map(|v| v.to_str().map(str::trim).unwrap_or(""));
        match self {
            Authenticator::NoAuth => {
                Ok(token.filter(|t| !t.is_empty()).map(|t| noauth(t, headers)))
            }
            Authenticator::Keystone(k) => match token {
                None => Ok(None),
                Some(t) => match k.validate(t).await {
                    Ok(c) => Ok(Some(c)),
                    Err(keystone::Rejection::Invalid) => {
                        Err(ApiError::unauthorized_keystone(&k.identity_uri))
                    }
                    Err(keystone::Rejection::Unavailable(why)) => {
                        Err(ApiError::identity_unavailable(why))
                    }
                },
            },
        }
    }

    /// The answer to a request without a token on a protected path.
    pub fn missing_token(&self) -> ApiError {
        match self {
            Authenticator::NoAuth => ApiError::unauthorized(),
            Authenticator::Keystone(k) => ApiError::unauthorized_keystone(&k.identity_uri),
        }
    }
}

/// noauth2: the token is `USER[:PROJECT]`; `X-Project-Id`, `X-Roles` and
/// `OpenStack-System-Scope` say the rest, and the user `admin` holds the
/// admin role.
fn noauth(token: &str, headers: &HeaderMap) -> Credentials {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let (user, project) = match token.split_once(':') {
        Some((u, p)) => (u.to_string(), Some(p.to_string())),
        None => (
            token.to_string(),
            header("x-project-id").map(str::to_string),
        ),
    };
    let mut roles: Vec<String> = header("x-roles")
        .map(|r| {
            r.split(',')
                .map(|s| s.trim().to_lowercase())
                .filter(|s| !s.is_empty())
                .collect()
        })
        .unwrap_or_default();
    if user == "admin" {
        roles.push("admin".into());
    }
    Credentials {
        user_id: user,
        project_id: project,
        domain_id: None,
        roles,
        system_scope: header("openstack-system-scope").map(str::to_string),
    }
}
