//! Every route, declared once: the table drives the router, the `Allow`
//! header of 405s, the microversion each route appeared in, the policy
//! rule it is checked against, and the OpenAPI document (Placement's
//! `ROUTE_DECLARATIONS` is the model).

use super::microversion::Microversion;
use super::{
    aggregates as agg, allocation_candidates, allocations as alloc, deployments, health,
    inventories as inv, reshaper, resource_classes as rc, resource_providers as rp, root, topology,
    traits, usages,
};
use crate::state::AppState;
use axum::http::Method;
use axum::routing::{delete, get, post, put, MethodRouter};

/// One route.
pub struct Route {
    /// The path, with `{param}` segments.
    pub path: &'static str,
    /// The method.
    pub method: Method,
    /// The microversion the route appeared in (older requests get 404).
    pub since: Microversion,
    /// The policy rule the caller must pass (None: public).
    pub rule: Option<&'static str>,
    /// One line for the OpenAPI document.
    pub summary: &'static str,
    /// The handler, as a method router for this method alone.
    pub handler: fn() -> MethodRouter<AppState>,
}

/// The route of a matched path and method.
pub fn find(path: &str, method: &Method) -> Option<&'static Route> {
    ROUTES
        .iter()
        .find(|r| r.path == path && r.method == *method)
}

/// The methods a path allows, for `Allow` (in declaration order).
pub fn allowed(path: &str) -> String {
    ROUTES
        .iter()
        .filter(|r| r.path == path)
        .map(|r| r.method.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every route.
pub const ROUTES: &[Route] = &[
    Route {
        path: "/",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: None,
        summary: "Version document",
        handler: || get(root::home),
    },
    Route {
        path: "/healthcheck",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: None,
        summary: "Health of this process and its database (oslo.middleware's shape, no token): 200 OK or 503 with the reason",
        handler: || get(health::check),
    },
    Route {
        path: "/resource_providers",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:list"),
        summary: "List resource providers (filters: name, uuid, member_of, resources, in_tree, required)",
        handler: || get(rp::list),
    },
    Route {
        path: "/resource_providers",
        method: Method::POST,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:create"),
        summary: "Create a resource provider",
        handler: || post(rp::create),
    },
    Route {
        path: "/resource_providers/{uuid}",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:show"),
        summary: "Show a resource provider",
        handler: || get(rp::show),
    },
    Route {
        path: "/resource_providers/{uuid}",
        method: Method::PUT,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:update"),
        summary: "Rename or re-parent a resource provider",
        handler: || put(rp::update),
    },
    Route {
        path: "/resource_providers/{uuid}",
        method: Method::DELETE,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:delete"),
        summary: "Delete a resource provider",
        handler: || delete(rp::delete),
    },
    Route {
        path: "/resource_providers/{uuid}/inventories",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:inventories:list"),
        summary: "List a provider's inventories",
        handler: || get(inv::list),
    },
    Route {
        path: "/resource_providers/{uuid}/inventories",
        method: Method::POST,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:inventories:create"),
        summary: "Add one inventory",
        handler: || post(inv::create),
    },
    Route {
        path: "/resource_providers/{uuid}/inventories",
        method: Method::PUT,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:inventories:update"),
        summary: "Replace all inventories",
        handler: || put(inv::replace),
    },
    Route {
        path: "/resource_providers/{uuid}/inventories",
        method: Method::DELETE,
        since: Microversion::new(1, 5),
        rule: Some("placement:resource_providers:inventories:delete"),
        summary: "Delete all inventories",
        handler: || delete(inv::delete_all),
    },
    Route {
        path: "/resource_providers/{uuid}/inventories/{resource_class}",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:inventories:show"),
        summary: "Show one inventory",
        handler: || get(inv::show),
    },
    Route {
        path: "/resource_providers/{uuid}/inventories/{resource_class}",
        method: Method::PUT,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:inventories:update"),
        summary: "Update one inventory",
        handler: || put(inv::update),
    },
    Route {
        path: "/resource_providers/{uuid}/inventories/{resource_class}",
        method: Method::DELETE,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:inventories:delete"),
        summary: "Delete one inventory",
        handler: || delete(inv::delete),
    },
    Route {
        path: "/resource_providers/{uuid}/usages",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:usages"),
        summary: "Usages of a provider",
        handler: || get(usages::provider),
    },
    Route {
        path: "/resource_providers/{uuid}/aggregates",
        method: Method::GET,
        since: Microversion::new(1, 1),
        rule: Some("placement:resource_providers:aggregates:list"),
        summary: "A provider's aggregates",
        handler: || get(agg::show),
    },
    Route {
        path: "/resource_providers/{uuid}/aggregates",
        method: Method::PUT,
        since: Microversion::new(1, 1),
        rule: Some("placement:resource_providers:aggregates:update"),
        summary: "Replace a provider's aggregates",
        handler: || put(agg::replace),
    },
    Route {
        path: "/resource_providers/{uuid}/allocations",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:allocations:list"),
        summary: "Allocations against a provider",
        handler: || get(alloc::of_provider),
    },
    Route {
        path: "/resource_providers/{uuid}/traits",
        method: Method::GET,
        since: Microversion::new(1, 6),
        rule: Some("placement:resource_providers:traits:list"),
        summary: "A provider's traits",
        handler: || get(traits::of_provider),
    },
    Route {
        path: "/resource_providers/{uuid}/traits",
        method: Method::PUT,
        since: Microversion::new(1, 6),
        rule: Some("placement:resource_providers:traits:update"),
        summary: "Replace a provider's traits",
        handler: || put(traits::set_for_provider),
    },
    Route {
        path: "/resource_providers/{uuid}/traits",
        method: Method::DELETE,
        since: Microversion::new(1, 6),
        rule: Some("placement:resource_providers:traits:delete"),
        summary: "Remove a provider's traits",
        handler: || delete(traits::clear_provider),
    },
    Route {
        path: "/resource_classes",
        method: Method::GET,
        since: Microversion::new(1, 2),
        rule: Some("placement:resource_classes:list"),
        summary: "List resource classes",
        handler: || get(rc::list),
    },
    Route {
        path: "/resource_classes",
        method: Method::POST,
        since: Microversion::new(1, 2),
        rule: Some("placement:resource_classes:create"),
        summary: "Create a custom resource class",
        handler: || post(rc::create),
    },
    Route {
        path: "/resource_classes/{name}",
        method: Method::GET,
        since: Microversion::new(1, 2),
        rule: Some("placement:resource_classes:show"),
        summary: "Show a resource class",
        handler: || get(rc::show),
    },
    Route {
        path: "/resource_classes/{name}",
        method: Method::PUT,
        since: Microversion::new(1, 2),
        rule: Some("placement:resource_classes:update"),
        summary: "Rename (1.2-1.6) or create-or-verify (1.7+) a custom class",
        handler: || put(rc::update),
    },
    Route {
        path: "/resource_classes/{name}",
        method: Method::DELETE,
        since: Microversion::new(1, 2),
        rule: Some("placement:resource_classes:delete"),
        summary: "Delete a custom resource class",
        handler: || delete(rc::delete),
    },
    Route {
        path: "/traits",
        method: Method::GET,
        since: Microversion::new(1, 6),
        rule: Some("placement:traits:list"),
        summary: "List traits (name=in:/startswith:, associated=)",
        handler: || get(traits::list),
    },
    Route {
        path: "/traits/{name}",
        method: Method::GET,
        since: Microversion::new(1, 6),
        rule: Some("placement:traits:show"),
        summary: "Check a trait exists",
        handler: || get(traits::show),
    },
    Route {
        path: "/traits/{name}",
        method: Method::PUT,
        since: Microversion::new(1, 6),
        rule: Some("placement:traits:update"),
        summary: "Create a custom trait",
        handler: || put(traits::create),
    },
    Route {
        path: "/traits/{name}",
        method: Method::DELETE,
        since: Microversion::new(1, 6),
        rule: Some("placement:traits:delete"),
        summary: "Delete a custom trait",
        handler: || delete(traits::delete),
    },
    Route {
        path: "/allocations",
        method: Method::POST,
        since: Microversion::new(1, 13),
        rule: Some("placement:allocations:manage"),
        summary: "Write allocations of several consumers atomically",
        handler: || post(alloc::post_many),
    },
    Route {
        path: "/allocations/{consumer_uuid}",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:allocations:list"),
        summary: "A consumer's allocations",
        handler: || get(alloc::show),
    },
    Route {
        path: "/allocations/{consumer_uuid}",
        method: Method::PUT,
        since: Microversion::new(1, 0),
        rule: Some("placement:allocations:update"),
        summary: "Replace a consumer's allocations",
        handler: || put(alloc::replace),
    },
    Route {
        path: "/allocations/{consumer_uuid}",
        method: Method::DELETE,
        since: Microversion::new(1, 0),
        rule: Some("placement:allocations:delete"),
        summary: "Delete a consumer's allocations",
        handler: || delete(alloc::delete),
    },
    Route {
        path: "/allocation_candidates",
        method: Method::GET,
        since: Microversion::new(1, 10),
        rule: Some("placement:allocation_candidates:list"),
        summary: "Allocation candidates for request groups (resources, required, member_of, in_tree, group_policy, same_subtree, root_required)",
        handler: || get(allocation_candidates::list),
    },
    Route {
        path: "/resource_providers/{uuid}/cpu_topology",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:cpu_topology:show"),
        summary: "CPU topology of a provider with used and free shares per core (extension)",
        handler: || get(topology::show),
    },
    Route {
        path: "/resource_providers/{uuid}/cpu_topology",
        method: Method::PUT,
        since: Microversion::new(1, 0),
        rule: Some("placement:resource_providers:cpu_topology:update"),
        summary: "Set the CPU topology; sets the CUSTOM_CPU_SHARES inventory (extension). Example: {\"share_base\": 100, \"max_fragment_cores\": -1, \"cores\": [{\"id\": \"0\", \"numa_node\": \"0\"}], \"numa_memory_mb\": {\"0\": 1024}}",
        handler: || put(topology::replace),
    },
    Route {
        path: "/deployments",
        method: Method::POST,
        since: Microversion::new(1, 0),
        rule: Some("placement:deployments:create"),
        summary: "Deploy N instances of an app: candidates, Eru capacity and strategy, allocations and core bindings in one transaction (extension). Example: {\"app\": \"web\", \"count\": 11, \"strategy\": \"auto\", \"cpu\": 1.7, \"cpu_bind\": true, \"memory_mb\": 512, \"project_id\": \"p\", \"user_id\": \"u\"}",
        handler: || post(deployments::create),
    },
    Route {
        path: "/deployments/{app}",
        method: Method::GET,
        since: Microversion::new(1, 0),
        rule: Some("placement:deployments:show"),
        summary: "Instances of an app per node with their core bindings (extension)",
        handler: || get(deployments::show),
    },
    Route {
        path: "/deployments/{app}/instances/{consumer_uuid}/resize",
        method: Method::POST,
        since: Microversion::new(1, 0),
        rule: Some("placement:deployments:resize"),
        summary: "Resize an instance by deltas on its node (extension). Example: {\"cpu\": 0.5, \"memory_mb\": -256}",
        handler: || post(deployments::resize),
    },
    Route {
        path: "/reshaper",
        method: Method::POST,
        since: Microversion::new(1, 30),
        rule: Some("placement:reshaper:reshape"),
        summary: "Move inventories and allocations atomically",
        handler: || post(reshaper::reshape),
    },
    Route {
        path: "/usages",
        method: Method::GET,
        since: Microversion::new(1, 9),
        rule: Some("placement:usages"),
        summary: "Usages of a project (and user, by consumer type from 1.38)",
        handler: || get(usages::project),
    },
];
