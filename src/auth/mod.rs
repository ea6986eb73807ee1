//! Who is calling. Under `noauth2` (Placement's test and development
//! mode) the token names the user (`admin` is the administrator) and the
//! identity headers are trusted; under `keystone` every token is validated
//! by Keystone and the identity comes from its answer alone, so identity
//! headers sent by a client change nothing.

pub mod keystone;
pub mod token_cache;

use crate::config::security::{AuthStrategy, SecurityArgs};
use crate::error::Error;
use crate::policy::Credentials;

/// What a request presents about its caller, read from its headers by the
/// HTTP layer: the token and, trusted under noauth2 only, the identity
/// headers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Presented<'a> {
    /// `X-Auth-Token`, trimmed (empty when not valid text).
    pub token: Option<&'a str>,
    /// `X-Project-Id`.
    pub project_id: Option<&'a str>,
    /// `X-Roles`, comma-separated.
    pub roles: Option<&'a str>,
    /// `OpenStack-System-Scope`.
    pub system_scope: Option<&'a str>,
}

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
    pub async fn identify(&self, presented: Presented<'_>) -> Result<Option<Credentials>, Error> {
        let token = presented.token;
        match self {
            Authenticator::NoAuth => Ok(token
                .filter(|t| !t.is_empty())
                .map(|t| noauth(t, presented))),
            Authenticator::Keystone(k) => match token {
                None => Ok(None),
                Some(t) => match k.validate(t).await {
                    Ok(c) => Ok(Some(c)),
                    Err(keystone::Rejection::Invalid) => {
                        Err(Error::unauthenticated(Some(k.identity_uri.clone())))
                    }
                    Err(keystone::Rejection::Unavailable(why)) => {
                        Err(Error::identity_unavailable(why))
                    }
                },
            },
        }
    }

    /// The answer to a request without a token on a protected path.
    pub fn missing_token(&self) -> Error {
        match self {
            Authenticator::NoAuth => Error::unauthenticated(None),
            Authenticator::Keystone(k) => Error::unauthenticated(Some(k.identity_uri.clone())),
        }
    }
}

/// noauth2: the token is `USER[:PROJECT]`; `X-Project-Id`, `X-Roles` and
/// `OpenStack-System-Scope` say the rest, and the user `admin` holds the
/// admin role.
fn noauth(token: &str, presented: Presented<'_>) -> Credentials {
    let given = |v: Option<&str>| {
        v.map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let (user, project) = match token.split_once(':') {
        Some((u, p)) => (u.to_string(), Some(p.to_string())),
        None => (token.to_string(), given(presented.project_id)),
    };
    let mut roles: Vec<String> = given(presented.roles)
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
        system_scope: given(presented.system_scope),
    }
}
