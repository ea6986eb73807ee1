//! Options of `placement serve` for running inside a cloud: how callers
//! are authenticated (noauth2 or Keystone), how Placement's policy is
//! enforced, and which browser origins may call (CORS). The flag names are
//! fixed: deployment tooling starts the server with them.

use clap::{Args, ValueEnum};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// How callers are authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthStrategy {
    /// Placement's `noauth2`: the token `admin` is the administrator;
    /// identity headers (`X-Roles`, `X-Project-Id`, …) are trusted.
    Noauth2,
    /// Every token is validated by Keystone; identity comes only from
    /// Keystone's answer.
    Keystone,
}

/// A password: parsed from flags or the environment, never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret(s.to_string()))
    }
}

/// Authentication, policy and CORS options.
#[derive(Debug, Clone, Args)]
pub struct SecurityArgs {
    /// `keystone`, or `noauth2`: no authentication, every caller may be
    /// admin (Placement's test mode). The default is noauth2 only without
    /// a config file (a `placement.conf` means keystone, as in Placement),
    /// and noauth2 serves a non-loopback address only when chosen
    /// explicitly (this flag, its variable or `[api] auth_strategy`).
    #[arg(
        long,
        env = "PLACEMENT_AUTH_STRATEGY",
        value_enum,
        default_value = "noauth2"
    )]
    pub auth_strategy: AuthStrategy,
    /// Whether the strategy was chosen (flag, environment or config file)
    /// rather than defaulted; set after parsing.
    #[arg(skip)]
    pub auth_strategy_chosen: bool,
    /// Keystone's v3 endpoint, e.g. `http://keystone:5000/v3`.
    #[arg(long, env = "PLACEMENT_KEYSTONE_URL")]
    pub keystone_url: Option<String>,
    /// The service user that validates tokens.
    #[arg(long, env = "PLACEMENT_KEYSTONE_USERNAME")]
    pub keystone_username: Option<String>,
    /// Its password (prefer the environment variable to the flag).
    #[arg(long, env = "PLACEMENT_KEYSTONE_PASSWORD", hide_env_values = true)]
    pub keystone_password: Option<Secret>,
    /// The project the service user's token is scoped to.
    #[arg(long, env = "PLACEMENT_KEYSTONE_PROJECT")]
    pub keystone_project: Option<String>,
    /// The service user's domain (name).
    #[arg(
        long,
        env = "PLACEMENT_KEYSTONE_USER_DOMAIN",
        default_value = "Default"
    )]
    pub keystone_user_domain: String,
    /// The service user's domain by id (`[keystone_authtoken]
    /// user_domain_id`); wins over the name.
    #[arg(long, env = "PLACEMENT_KEYSTONE_USER_DOMAIN_ID")]
    pub keystone_user_domain_id: Option<String>,
    /// The service project's domain (name).
    #[arg(
        long,
        env = "PLACEMENT_KEYSTONE_PROJECT_DOMAIN",
        default_value = "Default"
    )]
    pub keystone_project_domain: String,
    /// The service project's domain by id (`[keystone_authtoken]
    /// project_domain_id`); wins over the name.
    #[arg(long, env = "PLACEMENT_KEYSTONE_PROJECT_DOMAIN_ID")]
    pub keystone_project_domain_id: Option<String>,
    /// The identity endpoint a 401 names to clients (`WWW-Authenticate:
    /// Keystone uri=…`; keystonemiddleware's `www_authenticate_uri`), when
    /// clients reach Keystone elsewhere than --keystone-url (a public
    /// address in front of an internal one). Defaults to --keystone-url's root.
    #[arg(long, env = "PLACEMENT_KEYSTONE_WWW_AUTHENTICATE_URI")]
    pub keystone_www_authenticate_uri: Option<String>,
    /// PEM file of the certificate authorities that sign Keystone's
    /// certificate, beside the system's (`[keystone_authtoken] cafile`).
    #[arg(long, env = "PLACEMENT_KEYSTONE_CAFILE")]
    pub keystone_cafile: Option<PathBuf>,
    /// Accept any certificate from Keystone (`[keystone_authtoken]
    /// insecure`): for a lab only, warned about at start-up.
    #[arg(long, env = "PLACEMENT_KEYSTONE_INSECURE", num_args = 0..=1, default_value_t = false, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub keystone_insecure: bool,
    /// Seconds a validated token is trusted before Keystone is asked again
    /// (never past the token's expiry): a revoked token is refused at the
    /// latest this long after its revocation.
    #[arg(
        long,
        env = "PLACEMENT_KEYSTONE_TOKEN_CACHE_SECONDS",
        default_value_t = 300
    )]
    pub keystone_token_cache_seconds: u64,
    /// Seconds a token Keystone refused (unknown, expired, revoked) is
    /// refused again without asking Keystone (0: ask every time).
    #[arg(
        long,
        env = "PLACEMENT_KEYSTONE_INVALID_TOKEN_CACHE_SECONDS",
        default_value_t = 30
    )]
    pub keystone_invalid_token_cache_seconds: u64,
    /// Validated tokens kept in memory at most (and as many refused ones).
    #[arg(long, env = "PLACEMENT_KEYSTONE_TOKEN_CACHE_SIZE", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keystone_token_cache_size: u64,
    /// Seconds a call to Keystone may take before the request gets 503.
    #[arg(long, env = "PLACEMENT_KEYSTONE_TIMEOUT", default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
    pub keystone_timeout: u64,
    /// Only the new (secure RBAC) policy defaults count, as with
    /// oslo.policy 6 (Placement 16.0.0's), where `enforce_new_defaults`
    /// is on by default; `--enforce-new-defaults false` lets a rule with a
    /// deprecated default also accept that (a project admin may then
    /// reshape, for one).
    #[arg(long, env = "PLACEMENT_ENFORCE_NEW_DEFAULTS", num_args = 0..=1, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enforce_new_defaults: bool,
    /// Refuse tokens outside a rule's scope types, e.g. system-scoped
    /// tokens on Placement's project-scoped rules (oslo.policy's
    /// `enforce_scope`; on by default, `--enforce-scope=false` turns it off).
    #[arg(long, env = "PLACEMENT_ENFORCE_SCOPE", num_args = 0..=1, default_value_t = true, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub enforce_scope: bool,
    /// A policy file (YAML or JSON, oslo.policy's syntax) whose rules
    /// replace the defaults.
    #[arg(long, env = "PLACEMENT_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    /// Origins browsers may call from (comma-separated; CORS is off
    /// without one).
    #[arg(long, env = "PLACEMENT_CORS_ALLOWED_ORIGIN", value_delimiter = ',', num_args = 0..)]
    pub cors_allowed_origin: Vec<String>,
    /// Request headers a cross-origin call may send (comma-separated).
    #[arg(long, env = "PLACEMENT_CORS_ALLOW_HEADERS", value_delimiter = ',', num_args = 0..,
          default_value = "X-Auth-Token,X-Openstack-Request-Id,X-Identity-Status,X-Roles,X-Service-Catalog,X-User-Id,X-Tenant-Id,OpenStack-API-Version")]
    pub cors_allow_headers: Vec<String>,
    /// Response headers a cross-origin caller may read (comma-separated).
    #[arg(long, env = "PLACEMENT_CORS_EXPOSE_HEADERS", value_delimiter = ',', num_args = 0..,
          default_value = "X-Auth-Token,X-Openstack-Request-Id,X-Subject-Token,X-Service-Token,OpenStack-API-Version")]
    pub cors_expose_headers: Vec<String>,
    /// Seconds a browser may cache a preflight answer.
    #[arg(long, env = "PLACEMENT_CORS_MAX_AGE", default_value_t = 3600)]
    pub cors_max_age: u64,
}

/// CORS as oslo.middleware applies it, from the `--cors-*` options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorsRules {
    /// Origins allowed, exactly as browsers send them (`*`: any).
    pub allowed_origins: Vec<String>,
    /// Request headers a cross-origin call may send, lower case.
    pub allow_headers: Vec<String>,
    /// Response headers the caller may read.
    pub expose_headers: Vec<String>,
    /// `Access-Control-Max-Age` of preflight answers.
    pub max_age: u64,
}

/// How exposed a listener is without authentication.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exposure {
    /// Authenticated, or noauth2 on loopback only.
    Fine,
    /// noauth2, chosen explicitly, on an address others can reach: served,
    /// with this warning at every start.
    Warn(String),
}

impl SecurityArgs {
    /// Refuses noauth2 on a non-loopback listener unless it was chosen
    /// explicitly: whoever reaches such a port would be admin.
    pub fn exposure(&self, bind: &str, addrs: &[std::net::SocketAddr]) -> Result<Exposure, String> {
        let open = addrs.iter().any(|a| !a.ip().is_loopback());
        match (self.auth_strategy, open, self.auth_strategy_chosen) {
            (AuthStrategy::Keystone, _, _) | (_, false, _) => Ok(Exposure::Fine),
            (AuthStrategy::Noauth2, true, true) => Ok(Exposure::Warn(format!(
                "noauth2 on {bind}, which is not loopback: anyone who reaches it is admin (noauth2 is for testing only; use --auth-strategy keystone)"
            ))),
            (AuthStrategy::Noauth2, true, false) => Err(format!(
                "refusing to serve {bind} without authentication: it is not a loopback address, and in noauth2 (the default without a config file) anyone who reaches it is admin. Run behind Keystone (--auth-strategy keystone with --keystone-url …), bind to 127.0.0.1, or choose --auth-strategy noauth2 explicitly for a test setup"
            )),
        }
    }

    /// The CORS rules; None when no origin is allowed (CORS off).
    pub fn cors(&self) -> Option<CorsRules> {
        let clean = |v: &[String]| -> Vec<String> {
            v.iter()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        };
        let allowed_origins = clean(&self.cors_allowed_origin);
        if allowed_origins.is_empty() {
            return None;
        }
        Some(CorsRules {
            allowed_origins,
            allow_headers: clean(&self.cors_allow_headers)
                .into_iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
            expose_headers: clean(&self.cors_expose_headers),
            max_age: self.cors_max_age,
        })
    }
}
