//! Serving under a path prefix (`--path-prefix /placement`, where devstack
//! mounts Placement): a request is routed with the prefix taken off (and
//! one that arrives without it, from a proxy that took it off, is routed
//! as it is), and the paths answers name (`links`, `Location`) carry the
//! prefix, as Placement's do with the WSGI `SCRIPT_NAME`. Set once at
//! start-up, before the first request.

use axum::Router;
use std::sync::OnceLock;

static PREFIX: OnceLock<String> = OnceLock::new();

/// Sets the prefix: `/` followed by path segments of letters, digits,
/// `-`, `_` and `.`, no trailing `/`.
pub fn set(prefix: &str) -> Result<(), String> {
    let ok = prefix.starts_with('/')
        && !prefix.ends_with('/')
        && prefix[1..].split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        });
    if !ok {
        return Err(format!(
            "--path-prefix {prefix:?}: expected a path such as /placement (segments of letters, digits, -, _ and ., no trailing /)"
        ));
    }
    PREFIX
        .set(prefix.to_string())
        .map_err(|_| "--path-prefix is set once".to_string())
}

/// `path` as clients reach it: with the prefix (an empty path, the
/// version document's own link, stays empty, as in Placement).
pub fn apply(path: &str) -> String {
    match PREFIX.get() {
        Some(prefix) if !path.is_empty() => format!("{prefix}{path}"),
        _ => path.to_string(),
    }
}

/// A matched route pattern without the prefix: a route reached under the
/// prefix is matched as `/placement/resource_providers`, and the route
/// table (its policy rule, microversion and body) knows it as
/// `/resource_providers`.
pub fn strip(route: &str) -> &str {
    match PREFIX.get().and_then(|p| route.strip_prefix(p.as_str())) {
        Some("") => "/",
        Some(rest) if rest.starts_with('/') => rest,
        _ => route,
    }
}

/// The router reachable under the prefix as well as without it.
pub fn mount(router: Router) -> Router {
    match PREFIX.get() {
        Some(prefix) => Router::new()
            .nest_service(prefix, router.clone())
            .fallback_service(router),
        None => router,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_plain_paths_are_prefixes() {
        for bad in [
            "placement",
            "/placement/",
            "/",
            "/a//b",
            "/a/../b",
            "/a b",
            "/a?x",
        ] {
            assert!(super::set(bad).is_err(), "{bad}");
        }
    }
}
