//! The HTTP layer: the route table (every route in one place, 405 with
//! `Allow` for the rest), thin handlers one file per resource, and the
//! request pipeline.

pub mod aggregates;
pub mod allocation_candidates;
pub mod allocations;
pub mod deployments;
pub mod docs;
pub mod extract;
pub mod health;
pub mod inventories;
pub mod microversion;
pub mod middleware;
pub mod reshaper;
pub mod resource_classes;
pub mod resource_providers;
pub mod respond;
pub mod root;
pub mod schema;
pub mod topology;
pub mod traits;
pub mod usages;

use crate::error::ApiError;
use crate::state::AppState;
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use middleware::method_not_allowed as na;

fn route(r: MethodRouter<AppState>, allow: &'static str) -> MethodRouter<AppState> {
    r.fallback(na(allow))
}

/// Builds the router with every route, the per-route guard and the pipeline.
pub fn router(state: AppState) -> Router {
    use aggregates as agg;
    use allocations as alloc;
    use inventories as inv;
    use resource_classes as rc;
    use resource_providers as rp;
    let api = Router::new()
        .route("/", route(get(root::home), "GET"))
        .route("/healthcheck", route(get(health::check), "GET, HEAD"))
        .route(
            "/resource_providers",
            route(get(rp::list).post(rp::create), "GET, POST"),
        )
        .route(
            "/resource_providers/{uuid}",
            route(
                get(rp::show).put(rp::update).delete(rp::delete),
                "GET, PUT, DELETE",
            ),
        )
        .route(
            "/resource_providers/{uuid}/inventories",
            route(
                get(inv::list)
                    .post(inv::create)
                    .put(inv::replace)
                    .delete(inv::delete_all),
                "GET, POST, PUT, DELETE",
            ),
        )
        .route(
            "/resource_providers/{uuid}/inventories/{resource_class}",
            route(
                get(inv::show).put(inv::update).delete(inv::delete),
                "GET, PUT, DELETE",
            ),
        )
        .route(
            "/resource_providers/{uuid}/usages",
            route(get(usages::provider), "GET"),
        )
        .route(
            "/resource_providers/{uuid}/aggregates",
            route(get(agg::show).put(agg::replace), "GET, PUT"),
        )
        .route(
            "/resource_providers/{uuid}/allocations",
            route(get(alloc::of_provider), "GET"),
        )
        .route(
            "/resource_providers/{uuid}/traits",
            route(
                get(traits::of_provider)
                    .put(traits::set_for_provider)
                    .delete(traits::clear_provider),
                "GET, PUT, DELETE",
            ),
        )
        .route(
            "/resource_classes",
            route(get(rc::list).post(rc::create), "GET, POST"),
        )
        .route(
            "/resource_classes/{name}",
            route(
                get(rc::show).put(rc::update).delete(rc::delete),
                "GET, PUT, DELETE",
            ),
        )
        .route("/traits", route(get(traits::list), "GET"))
        .route(
            "/resource_providers/{uuid}/cpu_topology",
            route(get(topology::show).put(topology::replace), "GET, PUT"),
        )
        .route("/deployments", route(post(deployments::create), "POST"))
        .route("/deployments/{app}", route(get(deployments::show), "GET"))
        .route(
            "/deployments/{app}/instances/{consumer_uuid}/resize",
            route(post(deployments::resize), "POST"),
        )
        .route(
            "/traits/{name}",
            route(
                get(traits::show).put(traits::create).delete(traits::delete),
                "GET, PUT, DELETE",
            ),
        )
        .route("/allocations", route(post(alloc::post_many), "POST"))
        .route(
            "/allocations/{consumer_uuid}",
            route(
                get(alloc::show).put(alloc::replace).delete(alloc::delete),
                "GET, PUT, DELETE",
            ),
        )
        .route("/usages", route(get(usages::project), "GET"))
        .route(
            "/allocation_candidates",
            route(get(allocation_candidates::list), "GET"),
        )
        .route("/reshaper", route(post(reshaper::reshape), "POST"))
        .route_layer(axum::middleware::from_fn(middleware::route_guard))
        .fallback(not_found)
        .with_state(state.clone());
    let body_limits = middleware::BodyLimits::from(&*state.settings);
    api.merge(docs::router())
        // The pipeline reads bodies itself, with its own limit and timeout.
        .layer(axum::extract::DefaultBodyLimit::disable())
        .layer(axum::middleware::from_fn_with_state(
            body_limits,
            middleware::pipeline,
        ))
}

async fn not_found() -> ApiError {
    ApiError::not_found("")
}
