//! The HTTP layer: the route table (every route in one place, 405 with
//! `Allow` for the rest), thin handlers one file per resource, and the
//! request pipeline.

pub mod admissions;
pub mod aggregates;
pub mod allocation_candidates;
pub mod allocations;
pub mod colocation;
pub mod declines;
pub mod deployments;
pub mod docs;
pub mod extract;
pub mod health;
pub mod inventories;
pub mod metrics;
pub mod microversion;
pub mod middleware;
pub mod policy;
pub mod preemptions;
pub mod projects;
pub mod queue;
pub mod reservations;
pub mod reshaper;
pub mod resource_classes;
pub mod resource_providers;
pub mod respond;
pub mod root;
pub mod routes;
pub mod schema;
pub mod shares;
pub mod topology;
pub mod traits;
pub mod ui;
pub mod usages;
pub mod volumes;

use crate::api::respond::ApiError;
use crate::state::AppState;
use axum::routing::MethodRouter;
pub use axum::Router;

/// Builds the router from the route table, with 405 + `Allow` for other
/// methods, the per-route guard and the pipeline.
pub fn router(state: AppState) -> Router {
    let mut api = Router::new();
    let mut paths: Vec<&str> = Vec::new();
    for r in routes::all() {
        if !paths.contains(&r.path) {
            paths.push(r.path);
        }
    }
    for path in paths {
        let methods = routes::all()
            .filter(|r| r.path == path)
            .fold(MethodRouter::new(), |m, r| m.merge((r.handler)()));
        let allow = routes::allowed(path);
        api = api.route(
            path,
            methods.fallback(middleware::method_not_allowed(allow)),
        );
    }
    let gate = middleware::Gate {
        limits: middleware::BodyLimits::from(&*state.settings),
        security: state.security.clone(),
        db_deadline: std::time::Duration::from_secs(state.settings.db_request_timeout_secs),
    };
    api.route_layer(axum::middleware::from_fn_with_state(
        gate.clone(),
        middleware::route_guard,
    ))
    .fallback(not_found)
    .with_state(state)
    .merge(docs::router())
    .merge(ui::router())
    // The route guard reads bodies itself, with its own limits.
    .layer(axum::extract::DefaultBodyLimit::disable())
    .layer(axum::middleware::from_fn_with_state(
        gate,
        middleware::pipeline,
    ))
}

async fn not_found() -> ApiError {
    ApiError::not_found("")
}
