//! The OpenAPI document (`/openapi.json`) and Swagger UI (`/docs`), both
//! served without authentication. The document is generated from the route
//! list below with utoipa; `openapi/placement.json` holds a committed copy
//! that a test keeps fresh.

use super::microversion::{HISTORY, MAX, MIN};
use axum::Router;
use utoipa::openapi::path::{HttpMethod, OperationBuilder, PathItem};
use utoipa::openapi::{InfoBuilder, OpenApi, OpenApiBuilder, PathsBuilder, ResponseBuilder};
use utoipa_swagger_ui::SwaggerUi;

/// Every route: path, method, summary, microversion it appeared in.
pub const ROUTES: &[(&str, &str, &str, &str)] = &[
    ("/", "GET", "Version document", "1.0"),
    (
        "/healthcheck",
        "GET",
        "Health of this process and its database (oslo.middleware's shape, no token): 200 OK or 503 with the reason",
        "1.0",
    ),
    (
        "/resource_providers",
        "GET",
        "List resource providers (filters: name, uuid, member_of, resources, in_tree, required)",
        "1.0",
    ),
    (
        "/resource_providers",
        "POST",
        "Create a resource provider",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}",
        "GET",
        "Show a resource provider",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}",
        "PUT",
        "Rename or re-parent a resource provider",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}",
        "DELETE",
        "Delete a resource provider",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/inventories",
        "GET",
        "List a provider's inventories",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/inventories",
        "POST",
        "Add one inventory",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/inventories",
        "PUT",
        "Replace all inventories",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/inventories",
        "DELETE",
        "Delete all inventories",
        "1.5",
    ),
    (
        "/resource_providers/{uuid}/inventories/{resource_class}",
        "GET",
        "Show one inventory",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/inventories/{resource_class}",
        "PUT",
        "Update one inventory",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/inventories/{resource_class}",
        "DELETE",
        "Delete one inventory",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/usages",
        "GET",
        "Usages of a provider",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/aggregates",
        "GET",
        "A provider's aggregates",
        "1.1",
    ),
    (
        "/resource_providers/{uuid}/aggregates",
        "PUT",
        "Replace a provider's aggregates",
        "1.1",
    ),
    (
        "/resource_providers/{uuid}/allocations",
        "GET",
        "Allocations against a provider",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/traits",
        "GET",
        "A provider's traits",
        "1.6",
    ),
    (
        "/resource_providers/{uuid}/traits",
        "PUT",
        "Replace a provider's traits",
        "1.6",
    ),
    (
        "/resource_providers/{uuid}/traits",
        "DELETE",
        "Remove a provider's traits",
        "1.6",
    ),
    ("/resource_classes", "GET", "List resource classes", "1.2"),
    (
        "/resource_classes",
        "POST",
        "Create a custom resource class",
        "1.2",
    ),
    (
        "/resource_classes/{name}",
        "GET",
        "Show a resource class",
        "1.2",
    ),
    (
        "/resource_classes/{name}",
        "PUT",
        "Rename (1.2-1.6) or create-or-verify (1.7+) a custom class",
        "1.2",
    ),
    (
        "/resource_classes/{name}",
        "DELETE",
        "Delete a custom resource class",
        "1.2",
    ),
    (
        "/traits",
        "GET",
        "List traits (name=in:/startswith:, associated=)",
        "1.6",
    ),
    ("/traits/{name}", "GET", "Check a trait exists", "1.6"),
    ("/traits/{name}", "PUT", "Create a custom trait", "1.6"),
    ("/traits/{name}", "DELETE", "Delete a custom trait", "1.6"),
    (
        "/allocations",
        "POST",
        "Write allocations of several consumers atomically",
        "1.13",
    ),
    (
        "/allocations/{consumer_uuid}",
        "GET",
        "A consumer's allocations",
        "1.0",
    ),
    (
        "/allocations/{consumer_uuid}",
        "PUT",
        "Replace a consumer's allocations",
        "1.0",
    ),
    (
        "/allocations/{consumer_uuid}",
        "DELETE",
        "Delete a consumer's allocations",
        "1.0",
    ),
    (
        "/allocation_candidates",
        "GET",
        "Allocation candidates for request groups (resources, required, member_of, in_tree, group_policy, same_subtree, root_required)",
        "1.10",
    ),
    (
        "/resource_providers/{uuid}/cpu_topology",
        "GET",
        "CPU topology of a provider with used and free shares per core (extension)",
        "1.0",
    ),
    (
        "/resource_providers/{uuid}/cpu_topology",
        "PUT",
        "Set the CPU topology; sets the CUSTOM_CPU_SHARES inventory (extension). Example: {\"share_base\": 100, \"max_fragment_cores\": -1, \"cores\": [{\"id\": \"0\", \"numa_node\": \"0\"}], \"numa_memory_mb\": {\"0\": 1024}}",
        "1.0",
    ),
    (
        "/deployments",
        "POST",
        "Deploy N instances of an app: candidates, Eru capacity and strategy, allocations and core bindings in one transaction (extension). Example: {\"app\": \"web\", \"count\": 11, \"strategy\": \"auto\", \"cpu\": 1.7, \"cpu_bind\": true, \"memory_mb\": 512, \"project_id\": \"p\", \"user_id\": \"u\"}",
        "1.0",
    ),
    (
        "/deployments/{app}",
        "GET",
        "Instances of an app per node with their core bindings (extension)",
        "1.0",
    ),
    (
        "/deployments/{app}/instances/{consumer_uuid}/resize",
        "POST",
        "Resize an instance by deltas on its node (extension). Example: {\"cpu\": 0.5, \"memory_mb\": -256}",
        "1.0",
    ),
    (
        "/reshaper",
        "POST",
        "Move inventories and allocations atomically",
        "1.30",
    ),
    (
        "/usages",
        "GET",
        "Usages of a project (and user, by consumer type from 1.38)",
        "1.9",
    ),
];

/// The microversion a route appeared in, the single place versions gate routes.
pub fn since(method: &str, route: &str) -> Option<super::microversion::Microversion> {
    ROUTES
        .iter()
        .find(|(p, m, _, _)| *p == route && *m == method)
        .and_then(|(_, _, _, v)| v.split_once('.'))
        .and_then(|(a, b)| {
            Some(super::microversion::Microversion::new(
                a.parse().ok()?,
                b.parse().ok()?,
            ))
        })
}

fn method(m: &str) -> HttpMethod {
    match m {
        "POST" => HttpMethod::Post,
        "PUT" => HttpMethod::Put,
        "DELETE" => HttpMethod::Delete,
        _ => HttpMethod::Get,
    }
}

/// Builds the OpenAPI document.
pub fn openapi() -> OpenApi {
    let history: Vec<String> = HISTORY
        .iter()
        .map(|(v, what)| format!("- {v}: {what}"))
        .collect();
    let description = format!(
        "OpenStack Placement API, microversions {MIN} to {MAX} (header `OpenStack-API-Version: placement X.Y`). \
         Errors use `{{\"errors\": [{{status, title, detail, code, request_id}}]}}`.\n\n{}",
        history.join("\n")
    );
    let mut paths = PathsBuilder::new();
    for (path, m, summary, since) in ROUTES {
        let op = OperationBuilder::new()
            .summary(Some(summary.to_string()))
            .description(Some(format!("Available from microversion {since}.")))
            .response("200", ResponseBuilder::new().description("Success"))
            .response(
                "400",
                ResponseBuilder::new().description("Bad request (Placement error body)"),
            )
            .build();
        paths = paths.path(path.to_string(), PathItem::new(method(m), op));
    }
    OpenApiBuilder::new()
        .info(
            InfoBuilder::new()
                .title("placement")
                .version(env!("CARGO_PKG_VERSION"))
                .description(Some(description)),
        )
        .paths(paths)
        .build()
}

/// `/openapi.json` and `/docs`.
pub fn router() -> Router {
    Router::new().merge(SwaggerUi::new("/docs").url("/openapi.json", openapi()))
}
