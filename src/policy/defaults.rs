//! Placement's policy rules (openstack-placement 16.0.0's
//! `placement.policies.list_rules()`): each rule's default check string,
//! the deprecated one the legacy mode still honours, and its scope types.

use super::Scope;

/// One registered rule.
#[derive(Debug, Clone, Copy)]
pub struct RuleDefault {
    /// The rule's name, as handlers and policy files name it.
    pub name: &'static str,
    /// The check string under the new (secure RBAC) defaults.
    pub check: &'static str,
    /// The check string the legacy mode also accepts (`new or deprecated`).
    pub deprecated: Option<&'static str>,
    /// The token scopes the rule admits when scope is enforced.
    pub scope_types: Option<&'static [Scope]>,
}

/// The default of this service's own rules that address nothing a
/// project owns, or what an operator decides (quotas, weights, policies,
/// providers): the same as Placement's administrative rules.
pub const EXTENSION_CHECK: &str = "rule:admin_or_service_api";

/// The default of the rules by which a project's readers see their own
/// queue, advice, quota and weight (the target's project is the request's,
/// the advised victims', or the path's).
pub const TENANT_READ: &str = "rule:admin_or_service_api or rule:project_reader_api";

/// The default of the rules by which a project's members submit and
/// cancel their own queued requests (every project a list of submissions names).
pub const TENANT_WRITE: &str =
    "rule:admin_or_service_api or (role:member and project_id:%(project_id)s)";

/// The rules of this service's own endpoints (deployments, fairness,
/// colocation, CPU topology) with their defaults, all of project scope. A
/// test in `api::routes` keeps this list and the route table in step.
pub const EXTENSION_RULES: &[(&str, &str)] = &[
    ("placement:admissions:create", EXTENSION_CHECK),
    ("placement:colocation_policy:delete", EXTENSION_CHECK),
    ("placement:colocation_policy:show", EXTENSION_CHECK),
    ("placement:colocation_policy:update", EXTENSION_CHECK),
    ("placement:consumers:priority:show", EXTENSION_CHECK),
    ("placement:consumers:priority:update", EXTENSION_CHECK),
    ("placement:declines:create", EXTENSION_CHECK),
    ("placement:declines:delete", EXTENSION_CHECK),
    ("placement:deployments:create", EXTENSION_CHECK),
    ("placement:deployments:list", EXTENSION_CHECK),
    ("placement:deployments:resize", EXTENSION_CHECK),
    ("placement:deployments:show", EXTENSION_CHECK),
    ("placement:fairness:shares", EXTENSION_CHECK),
    ("placement:preemptions:list", TENANT_READ),
    ("placement:projects:fairness:show", TENANT_READ),
    ("placement:projects:fairness:update", EXTENSION_CHECK),
    ("placement:projects:quota:show", TENANT_READ),
    ("placement:projects:quota:update", EXTENSION_CHECK),
    ("placement:queue:create", TENANT_WRITE),
    ("placement:queue:delete", TENANT_WRITE),
    ("placement:queue:list", TENANT_READ),
    ("placement:queue:show", TENANT_READ),
    (
        "placement:resource_providers:colocation_policy:delete",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:colocation_policy:show",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:colocation_policy:update",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:cpu_topology:show",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:cpu_topology:update",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:eviction_candidates:show",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:evictions:create",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:project_reservations:delete",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:project_reservations:show",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:project_reservations:update",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:suppression:show",
        EXTENSION_CHECK,
    ),
    (
        "placement:resource_providers:usage_reports:create",
        EXTENSION_CHECK,
    ),
    ("placement:resource_providers:volumes:show", EXTENSION_CHECK),
    (
        "placement:resource_providers:volumes:update",
        EXTENSION_CHECK,
    ),
];

/// Every rule Placement registers, in its order.
pub const PLACEMENT_RULES: &[RuleDefault] = &[
    RuleDefault {
        name: "admin_api",
        check: "role:admin",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "service_api",
        check: "role:service",
        deprecated: Some("role:admin"),
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "admin_or_service_api",
        check: "role:admin or role:service",
        deprecated: Some("role:admin"),
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "project_reader_api",
        check: "role:reader and project_id:%(project_id)s",
        deprecated: Some("role:admin"),
        scope_types: None,
    },
    RuleDefault {
        name: "admin_or_project_reader_or_service_api",
        check: "role:admin or rule:project_reader_api or role:service",
        deprecated: Some("role:admin"),
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:create",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:show",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:update",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:delete",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_classes:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_classes:create",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_classes:show",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_classes:update",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_classes:delete",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:inventories:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:inventories:create",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:inventories:show",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:inventories:update",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:inventories:delete",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:aggregates:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:aggregates:update",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:usages",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:usages",
        check: "rule:admin_or_project_reader_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:traits:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:traits:show",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:traits:update",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:traits:delete",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:traits:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:traits:update",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:traits:delete",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:allocations:manage",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:allocations:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:allocations:update",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:allocations:delete",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:resource_providers:allocations:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:allocation_candidates:list",
        check: "rule:admin_or_service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
    RuleDefault {
        name: "placement:reshaper:reshape",
        check: "rule:service_api",
        deprecated: None,
        scope_types: Some(&[Scope::Project]),
    },
];
