//! Response bodies as typed values, each with an OpenAPI schema. A field
//! that a microversion does not have is an `Option` left out when `None`;
//! one that may also be JSON null says so in its schema. The route table
//! names each route's answer, and the test harness validates every JSON
//! answer of the test suite against it.

use super::{register, Schemas};
use crate::types::Inventory;
use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;
use uuid::Uuid;

/// A link of Placement's `links` lists.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Link {
    /// `self`, `inventories`, `usages`, ...
    pub rel: String,
    /// The linked path.
    pub href: String,
}

impl Link {
    /// A link to `href` named `rel` (under the path prefix, if any).
    pub fn new(rel: &str, href: String) -> Self {
        Link {
            rel: rel.to_string(),
            href: crate::api::respond::path_prefix::apply(&href),
        }
    }
}

/// `GET /`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionDocument {
    /// The one version entry.
    pub versions: Vec<VersionEntry>,
}

/// One API version.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VersionEntry {
    /// `v1.0`.
    pub id: String,
    /// Newest microversion.
    pub max_version: String,
    /// Oldest microversion.
    pub min_version: String,
    /// `CURRENT`.
    pub status: String,
    /// Self link.
    pub links: Vec<Link>,
}

/// A resource provider.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Provider {
    /// Identity.
    pub uuid: Uuid,
    /// Unique name.
    pub name: String,
    /// Generation for optimistic concurrency.
    pub generation: i32,
    /// Links to its sub-resources (more from 1.1, 1.6 and 1.11).
    pub links: Vec<Link>,
    /// 1.14+: the parent, null for a root.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Uuid>)]
    pub parent_provider_uuid: Option<Option<Uuid>>,
    /// 1.14+: the root of its tree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub root_provider_uuid: Option<Uuid>,
}

/// `GET /resource_providers`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderList {
    /// The providers, by id.
    pub resource_providers: Vec<Provider>,
}

/// `GET|PUT|POST .../inventories/{rc}`: one record and the generation.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InventoryWithGeneration {
    /// The record.
    #[serde(flatten)]
    pub inventory: Inventory,
    /// The provider's generation.
    pub resource_provider_generation: i32,
}

/// `GET|PUT .../inventories`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Inventories {
    /// The provider's generation.
    pub resource_provider_generation: i32,
    /// Records by class: in class order when read, as written when put
    /// (Placement's orders).
    pub inventories: IndexMap<String, Inventory>,
}

/// `GET .../usages`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderUsages {
    /// The provider's generation.
    pub resource_provider_generation: i32,
    /// Units allocated by class, in class order.
    pub usages: IndexMap<String, i64>,
}

/// `GET /usages`: units by class (before 1.38), or by consumer type, each
/// with its classes and `consumer_count` (1.38+).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectUsages {
    /// Usages, in class order (by consumer type: the type seen first in
    /// class order first).
    #[schema(value_type = Object)]
    pub usages: IndexMap<String, Value>,
}

/// `GET|PUT .../aggregates`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Aggregates {
    /// Aggregate uuids.
    pub aggregates: Vec<Uuid>,
    /// 1.19+: the provider's generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_provider_generation: Option<i32>,
}

/// `GET /traits`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TraitList {
    /// Trait names.
    pub traits: Vec<String>,
}

/// `GET|PUT .../traits`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderTraits {
    /// Trait names.
    pub traits: Vec<String>,
    /// The provider's generation.
    pub resource_provider_generation: i32,
}

/// A resource class.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceClass {
    /// Name.
    pub name: String,
    /// Self link.
    pub links: Vec<Link>,
}

/// `GET /resource_classes`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResourceClassList {
    /// Every class, standard first.
    pub resource_classes: Vec<ResourceClass>,
}

/// A consumer's share of one provider.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderShare {
    /// Units by class, in the order written.
    pub resources: IndexMap<String, i64>,
    /// The provider's generation.
    pub generation: i32,
}

/// `GET /allocations/{consumer}`.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerAllocations {
    /// Shares by provider uuid, in the order written.
    pub allocations: IndexMap<String, ProviderShare>,
    /// 1.12+: owning project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// 1.12+: owning user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// 1.28+: the consumer's generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_generation: Option<i32>,
    /// 1.38+: the consumer's type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_type: Option<String>,
}

/// A consumer's share of the provider asked about.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerShare {
    /// Units by class, in class order.
    pub resources: IndexMap<String, i64>,
    /// 1.28+: the consumer's generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer_generation: Option<i32>,
}

/// `GET /resource_providers/{uuid}/allocations`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderAllocations {
    /// Shares by consumer uuid, oldest consumer first (Placement's order
    /// on MariaDB).
    pub allocations: IndexMap<String, ConsumerShare>,
    /// The provider's generation.
    pub resource_provider_generation: i32,
}

/// `GET /allocation_candidates` (rendered straight to text for speed; this
/// is its shape).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AllocationCandidates {
    /// One allocation request per candidate (a list before 1.12, a dict of
    /// providers after; `mappings` from 1.34).
    #[schema(value_type = Vec<Object>)]
    pub allocation_requests: Vec<Value>,
    /// Per provider: resources with capacity and use; traits from 1.17;
    /// parent and root uuids from 1.29.
    #[schema(value_type = Object)]
    pub provider_summaries: BTreeMap<String, Value>,
}

/// `GET /healthcheck` with `Accept: application/json`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Health {
    /// Always false (no detailed report).
    pub detailed: bool,
    /// `OK`, or why not.
    pub reasons: Vec<String>,
}

/// One core of a CPU topology and its shares.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CoreShares {
    /// Core id.
    pub id: String,
    /// NUMA node, if any.
    pub numa_node: Option<String>,
    /// Shares bound to instances.
    pub used_shares: i64,
    /// Shares still free.
    pub free_shares: i64,
}

/// `GET|PUT .../cpu_topology` (extension).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CpuTopology {
    /// Shares in one whole core.
    pub share_base: i32,
    /// Most cores that may hold fragments; -1 = unlimited.
    pub max_fragment_cores: i32,
    /// Cores with their shares.
    pub cores: Vec<CoreShares>,
    /// Memory per NUMA node, MiB.
    pub numa_memory_mb: BTreeMap<String, i64>,
    /// What the node's non-bound instances share (Eru's remap).
    pub shared_pool: SharedPool,
    /// The provider's generation.
    pub resource_provider_generation: i32,
}

/// The cores a node's non-bound instances share: every core no bound
/// instance holds a share of, or every core when bound instances touch
/// them all (Eru's remap). Current as bound instances come and go.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SharedPool {
    /// The cores, in topology order.
    pub cores: Vec<String>,
    /// The non-bound deployment instances on the node.
    pub instances: Vec<Uuid>,
}

/// `GET|PUT /resource_providers/{uuid}/volumes` (extension).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Volumes {
    /// Each disk.
    pub volumes: BTreeMap<String, VolumeUse>,
    /// The provider's generation.
    pub resource_provider_generation: i32,
}

/// One disk of [`Volumes`], bytes.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeUse {
    /// Its size.
    pub size: i64,
    /// What instances hold.
    pub used: i64,
    /// What is left.
    pub free: i64,
}

/// `POST /deployments` and its dry run (extension).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentAnswer {
    /// The app.
    pub app: String,
    /// True for a dry run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<bool>,
    /// Instances each node could take: every candidate node with room in
    /// a dry run; the nodes it placed instances on otherwise.
    pub capacity_map: BTreeMap<String, i64>,
    /// Dry run: the capacity over every node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_capacity: Option<i64>,
    /// New instances per node.
    pub deploy_map: BTreeMap<String, i64>,
    /// Created instances per node uuid (dry run: `plans`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instances: Option<BTreeMap<Uuid, Vec<PlacedInstance>>>,
    /// Dry run: the plans per node uuid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plans: Option<BTreeMap<Uuid, Vec<PlacedInstance>>>,
    /// Dry run: every candidate node with its capacity, or the first
    /// reason it takes none (`no_topology`, `cpu`, `memory`, `vcpu`,
    /// `cpu_shares`, `fragment_cores`) with the numbers; the same list a
    /// refusal carries as `errors[0].nodes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<crate::error::NodeReport>>,
}

/// One instance a deployment placed (or, for a dry run, would place).
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlacedInstance {
    /// Its consumer.
    pub consumer_uuid: Uuid,
    /// Its node.
    pub resource_provider_uuid: Uuid,
    /// Shares per bound core (empty unless bound).
    pub cpu_map: BTreeMap<String, i64>,
    /// The NUMA node it is pinned to.
    pub numa_node: Option<String>,
    /// Its volumes, binding → {disk: bytes} (only instances with volumes).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub volume_plan: Option<crate::sched::VolumePlan>,
}

/// One node of [`DeploymentView`]: its instances of the app.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NodeInstances {
    /// How many.
    pub count: usize,
    /// Each with its binding.
    pub instances: Vec<InstanceRecord>,
}

/// One running instance of an app.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct InstanceRecord {
    /// Its consumer.
    pub consumer_uuid: Uuid,
    /// CPUs.
    pub cpu: f64,
    /// Bound to cores?
    pub cpu_bind: bool,
    /// Memory, MiB.
    pub memory_mb: i64,
    /// Shares per bound core.
    pub cpu_map: BTreeMap<String, i64>,
    /// The NUMA node it is pinned to.
    pub numa_node: Option<String>,
    /// Its volumes, binding → {disk: bytes} (only instances with volumes).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub volume_plan: Option<crate::db::volumes::Plan>,
}

/// `GET /deployments/{app}` (extension).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentView {
    /// The app.
    pub app: String,
    /// Instances in all.
    pub count: usize,
    /// Per node uuid: count and instances with their bindings.
    pub nodes: BTreeMap<Uuid, NodeInstances>,
}

/// `GET /deployments` (extension).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeploymentList {
    /// Every app with instances, by name.
    pub deployments: Vec<AppSummary>,
}

/// One app of [`DeploymentList`].
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AppSummary {
    /// The app.
    pub app: String,
    /// Its instances.
    pub count: i64,
    /// The nodes they are on.
    pub nodes: i64,
}

/// `POST .../resize` (extension).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Resized {
    /// The instance.
    pub consumer_uuid: Uuid,
    /// Its node.
    pub resource_provider_uuid: Uuid,
    /// CPUs now.
    pub cpu: f64,
    /// Bound to cores?
    pub cpu_bind: bool,
    /// Memory now, MiB.
    pub memory_mb: i64,
    /// Shares per bound core.
    pub cpu_map: BTreeMap<String, i64>,
    /// NUMA node, if pinned.
    pub numa_node: Option<String>,
}

/// `GET /allocation_candidates/explain` (extension): every root provider
/// (or the first `limit`), whether its tree fits, and if not why.
#[derive(Debug, Default, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Explanation {
    /// Per root provider, in uuid order.
    pub providers: Vec<RootExplanation>,
    /// How many trees fit, and how many each reason ruled out.
    pub summary: BTreeMap<String, usize>,
    /// False when the search stopped at its step budget: trees it did not
    /// reach are reported as not fitting.
    pub complete: bool,
    /// With `project_id`: the limits of the project (or an ancestor) that
    /// claiming the request would go over. Candidates are still listed, as
    /// Placement lists them, but the allocation write will refuse the claim
    /// (409 `placement.quota.exceeded`) unless it lands on the project's
    /// own reservations.
    pub quota: Vec<crate::fairness::projects::QuotaShortfall>,
}

/// One root provider's verdict.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RootExplanation {
    /// The root provider.
    pub root_provider_uuid: Uuid,
    /// Whether its tree anchors at least one candidate.
    pub fits: bool,
    /// The first constraint that rules it out: `root_required`, `in_tree`,
    /// `member_of`, `forbidden_trait`, `required_trait`, `stale_report`,
    /// `load_threshold`, `colocation_policy` (the load filter of a
    /// `priority_class=batch|free` query), `reservation` (room held for
    /// other projects' reservations), `sharing_aggregate` (only sharing
    /// providers in aggregates the tree is not in offer the class),
    /// `no_inventory`, `capacity` or `combination` (null when it fits).
    pub reason: Option<String>,
    /// The request group the reason is about ("" for the unnumbered one).
    pub group: Option<String>,
    /// The reason's numbers (for `capacity`: total, reserved,
    /// allocation_ratio, used, free, requested, min_unit, max_unit,
    /// step_size of the roomiest provider).
    #[schema(value_type = Option<Object>)]
    pub detail: Option<serde_json::Value>,
}

/// Every response schema, for the OpenAPI components.
pub fn components() -> Schemas {
    let mut out = Vec::new();
    register::<Link>(&mut out);
    register::<VersionDocument>(&mut out);
    register::<VersionEntry>(&mut out);
    register::<Provider>(&mut out);
    register::<ProviderList>(&mut out);
    register::<Inventory>(&mut out);
    register::<InventoryWithGeneration>(&mut out);
    register::<Inventories>(&mut out);
    register::<ProviderUsages>(&mut out);
    register::<ProjectUsages>(&mut out);
    register::<Aggregates>(&mut out);
    register::<TraitList>(&mut out);
    register::<ProviderTraits>(&mut out);
    register::<ResourceClass>(&mut out);
    register::<ResourceClassList>(&mut out);
    register::<ProviderShare>(&mut out);
    register::<ConsumerAllocations>(&mut out);
    register::<ConsumerShare>(&mut out);
    register::<ProviderAllocations>(&mut out);
    register::<AllocationCandidates>(&mut out);
    register::<Explanation>(&mut out);
    register::<RootExplanation>(&mut out);
    register::<Health>(&mut out);
    register::<CoreShares>(&mut out);
    register::<CpuTopology>(&mut out);
    register::<DeploymentAnswer>(&mut out);
    register::<DeploymentView>(&mut out);
    register::<DeploymentList>(&mut out);
    register::<Volumes>(&mut out);
    register::<SharedPool>(&mut out);
    register::<VolumeUse>(&mut out);
    register::<AppSummary>(&mut out);
    register::<Resized>(&mut out);
    register::<crate::fairness::projects::FairnessView>(&mut out);
    register::<crate::fairness::projects::QuotaView>(&mut out);
    register::<crate::fairness::projects::QuotaShortfall>(&mut out);
    register::<crate::fairness::reservations::ReservationView>(&mut out);
    register::<crate::fairness::shares::Shares>(&mut out);
    register::<crate::fairness::admission::AdmissionAnswer>(&mut out);
    register::<crate::fairness::declines::DeclineView>(&mut out);
    register::<crate::fairness::queue::QueueView>(&mut out);
    register::<crate::fairness::queue::HeldRoom>(&mut out);
    register::<crate::fairness::queue::QueueList>(&mut out);
    register::<crate::fairness::preemption::PreemptionView>(&mut out);
    register::<crate::fairness::preemption::PreemptionList>(&mut out);
    register::<crate::colocation::priority::PriorityView>(&mut out);
    register::<crate::colocation::policy_overrides::PolicyView>(&mut out);
    register::<crate::colocation::reports::ReportAccepted>(&mut out);
    register::<crate::colocation::advice::SuppressionView>(&mut out);
    register::<crate::colocation::advice::EvictionAdvice>(&mut out);
    register::<crate::colocation::advice::EvictionsRecorded>(&mut out);
    out
}
