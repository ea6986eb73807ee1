//! Newtypes for the identifiers and names the API passes around, each with
//! the validation Placement applies to it, and the allocation write a
//! consumer asks for (built by the API and deployments, carried out by
//! `allocation` and stored by `db::allocations`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;

/// The custom class a CPU topology's shares are counted in (cores x share_base).
pub const CPU_SHARES: &str = "CUSTOM_CPU_SHARES";

/// Aggregate membership filter of one request group or provider list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AggFilter {
    /// Each set must contain an aggregate of the provider (sets are ANDed).
    pub any_of: Vec<BTreeSet<uuid::Uuid>>,
    /// The provider must be in none of these.
    pub forbidden: BTreeSet<uuid::Uuid>,
}

impl AggFilter {
    /// True when there is nothing to filter on.
    pub fn is_empty(&self) -> bool {
        self.any_of.is_empty() && self.forbidden.is_empty()
    }
}

/// A resource provider's external identity (always rendered dashed lower case).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProviderUuid(pub uuid::Uuid);

/// A consumer's external identity (an instance, a migration, a deployment's instance).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ConsumerUuid(pub uuid::Uuid);

/// Parses a string the way Placement's `is_uuid_like` accepts it: dashed or
/// plain hex, braces and `urn:uuid:` allowed.
pub fn parse_uuid_like(s: &str) -> Option<uuid::Uuid> {
    uuid::Uuid::parse_str(s.trim()).ok()
}

impl ProviderUuid {
    /// Parses a provider uuid from any uuid-like string.
    pub fn parse(s: &str) -> Option<Self> {
        parse_uuid_like(s).map(Self)
    }
}

impl ConsumerUuid {
    /// Parses a consumer uuid from any uuid-like string.
    pub fn parse(s: &str) -> Option<Self> {
        parse_uuid_like(s).map(Self)
    }
}

impl fmt::Display for ProviderUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl fmt::Display for ConsumerUuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

/// Placement's capacity of an inventory: `(total - reserved) *
/// allocation_ratio`, in f64 as Placement computes it. The one formula the
/// candidate engine, the allocation write and inventory checks share; SQL
/// calls its twin `placement_capacity` (`db/definitions.sql`), and
/// `tests/claim_agrees.rs` checks the two agree.
pub fn capacity(total: i64, reserved: i64, allocation_ratio: f64) -> f64 {
    (total - reserved) as f64 * allocation_ratio
}

/// Placement's unit rule for one allocation of `n`: within
/// `[min_unit, max_unit]` and a multiple of `step_size`.
pub fn units_ok(n: i64, min_unit: i64, max_unit: i64, step_size: i64) -> bool {
    n >= min_unit && n <= max_unit && step_size > 0 && n % step_size == 0
}

// The field set spelled once. Placement's bodies read it (with
// Placement's defaults, below; the route's JSON schema has checked the
// body first), its answers carry it (flattened beside a generation), rows
// read it by flattening it (`#[sqlx(flatten)]`), and the candidate
// snapshot and the node agent hold it.
/// The capacity and unit fields of one inventory record. A body may leave
/// out all but `total`: reserved 0, min_unit 1, max_unit 2147483647,
/// step_size 1, allocation_ratio 1.0.
#[derive(
    Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema, sqlx::FromRow,
)]
pub struct Inventory {
    /// Units in total.
    pub total: i32,
    /// Units held back from allocation.
    #[serde(default)]
    pub reserved: i32,
    /// Smallest allocation.
    #[serde(default = "one_unit")]
    pub min_unit: i32,
    /// Largest allocation.
    #[serde(default = "any_units")]
    pub max_unit: i32,
    /// Allocations must be multiples of this.
    #[serde(default = "one_unit")]
    pub step_size: i32,
    /// Overcommit factor.
    #[serde(default = "no_overcommit")]
    pub allocation_ratio: f64,
}

fn one_unit() -> i32 {
    1
}

fn any_units() -> i32 {
    i32::MAX
}

fn no_overcommit() -> f64 {
    1.0
}

impl Inventory {
    /// Exact capacity used by allocation checks: `(total - reserved) * ratio`.
    pub fn capacity(&self) -> f64 {
        capacity(
            self.total.into(),
            self.reserved.into(),
            self.allocation_ratio,
        )
    }

    /// Whether one allocation of `n` respects the unit rules.
    pub fn units_ok(&self, n: i64) -> bool {
        units_ok(
            n,
            self.min_unit.into(),
            self.max_unit.into(),
            self.step_size.into(),
        )
    }

    /// `total` units, none reserved, at ratio 1, any amount from one unit
    /// to all of them: the record an owner writes when one allocation may
    /// take the whole (the node agent's classes, tests' providers).
    pub fn whole(total: i32) -> Inventory {
        Inventory {
            total,
            reserved: 0,
            min_unit: 1,
            max_unit: total.max(1),
            step_size: 1,
            allocation_ratio: 1.0,
        }
    }

    /// Truncated capacity shown in summaries and checked on inventory writes.
    pub fn capacity_int(&self) -> i64 {
        self.capacity() as i64
    }
}

/// A generation as the client sent it: any JSON number, kept exactly, so
/// that a value outside the stored range (2^32+5, 2^63, -1) never matches a
/// stored generation and a conflict message shows what was really sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GivenGeneration(serde_json::Number);

impl GivenGeneration {
    /// The generation in a JSON value, if it is a number.
    pub fn from_json(v: &serde_json::Value) -> Option<Self> {
        v.as_number().cloned().map(Self)
    }

    /// A generation the server itself read (a resize re-writes its consumer).
    pub fn known(g: impl Into<i64>) -> Self {
        Self(g.into().into())
    }

    /// True when the client's value is exactly `actual`.
    pub fn matches(&self, actual: impl Into<i64>) -> bool {
        self.0.as_i64() == Some(actual.into())
    }
}

impl fmt::Display for GivenGeneration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// Standard resource classes in their canonical order (index = database id),
/// generated from `os-resource-classes` by `scripts/gen_standard_names.sh`.
pub fn standard_resource_classes() -> impl Iterator<Item = &'static str> {
    include_str!("../data/standard_resource_classes.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
}

/// Standard traits, generated from `os-traits` by `scripts/gen_standard_names.sh`.
pub fn standard_traits() -> impl Iterator<Item = &'static str> {
    include_str!("../data/standard_traits.txt")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
}

/// True when `name` is a valid custom class or trait name: `^CUSTOM_[A-Z0-9_]+$`, at most 255 chars.
pub fn is_custom_name(name: &str) -> bool {
    name.len() <= 255
        && name.strip_prefix("CUSTOM_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        })
}

/// True when `name` matches the general class-name pattern `^[A-Z0-9_]+$`.
pub fn is_class_like(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// The trait whose presence makes a provider share its inventory with every
/// tree in its aggregates.
pub const MISC_SHARES_VIA_AGGREGATE: &str = "MISC_SHARES_VIA_AGGREGATE";

/// An enum whose values travel by name (JSON, stored text, a query's
/// value), declared with each name once: serde, the OpenAPI component,
/// the request schemas' `enum` lists ([`names`](#method.names)), parsing
/// and printing all read the one table. Each variant is written
/// `Variant => "name",`.
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:tt, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize,
            utoipa::ToSchema,
        )]
        $vis enum $name {
            $( $(#[$vmeta])* #[serde(rename = $text)] $variant, )+
        }

        impl $name {
            /// Every value, in the order declared.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// Its name, as the API and the database spell it.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }

            /// The value of that name, if any.
            pub fn named(name: &str) -> Option<Self> {
                match name {
                    $( $text => Some($name::$variant), )+
                    _ => None,
                }
            }

            /// Every name, in the order declared (a schema's `enum`).
            pub fn names() -> Vec<&'static str> {
                Self::ALL.iter().map(|v| v.name()).collect()
            }
        }
    };
}
pub(crate) use named_enum;

named_enum! {
    /// Koordinator's priority classes.
    pub enum PriorityClass {
        /// Production (koord-prod, 9000–9999): the default.
        Prod => "prod",
        /// koord-mid, 7000–7999.
        Mid => "mid",
        /// koord-batch, 5000–5999: runs on the batch inventory.
        Batch => "batch",
        /// koord-free, 3000–3999: runs on the batch inventory.
        Free => "free",
    }
}

/// Every class is declared highest first.
impl PriorityClass {
    /// The stored code: 0 prod, 1 mid, 2 batch, 3 free.
    pub fn code(self) -> i16 {
        match self {
            Self::Prod => 0,
            Self::Mid => 1,
            Self::Batch => 2,
            Self::Free => 3,
        }
    }

    /// Koordinator's integer priority range of the class.
    pub fn range(self) -> std::ops::RangeInclusive<i32> {
        match self {
            Self::Prod => 9000..=9999,
            Self::Mid => 7000..=7999,
            Self::Batch => 5000..=5999,
            Self::Free => 3000..=3999,
        }
    }

    /// Whether `priority` is in the class's range; the refusal's text when
    /// not (both writes that take a priority say it this way).
    pub fn admits(self, priority: i32) -> Result<(), String> {
        let range = self.range();
        if range.contains(&priority) {
            return Ok(());
        }
        Err(format!(
            "Priority {priority} is outside the {} class's range {}–{}.",
            self.name(),
            range.start(),
            range.end()
        ))
    }

    /// Batch and free work: best-effort, evictable, on the batch ledger.
    pub fn low(self) -> bool {
        matches!(self, Self::Batch | Self::Free)
    }

    /// Whether work of this class may allocate `resource_class` (§C.3):
    /// the server-owned batch classes are for batch and free work only,
    /// and that work runs on them alone, plus local disk.
    pub fn may_allocate(self, resource_class: &str) -> bool {
        let batch = BATCH_CLASSES.contains(&resource_class);
        if self.low() {
            batch || resource_class == "DISK_GB"
        } else {
            !batch
        }
    }
}

/// The server-computed resource classes of the batch ledger.
pub const BATCH_CLASSES: [&str; 2] = ["BATCH_VCPU_MILLI", "BATCH_MEMORY_MB"];

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn standard_names_are_unique_and_well_formed() {
        let classes: Vec<_> = standard_resource_classes().collect();
        assert_eq!(classes.len(), classes.iter().collect::<HashSet<_>>().len());
        assert!(classes.iter().all(|c| is_class_like(c)));
        // Append-only: ids of standard classes are their index.
        assert_eq!(&classes[..3], &["VCPU", "MEMORY_MB", "DISK_GB"]);
        assert_eq!(classes[14], "PCPU");
        let traits: Vec<_> = standard_traits().collect();
        assert_eq!(traits.len(), traits.iter().collect::<HashSet<_>>().len());
        assert!(traits.iter().all(|t| is_class_like(t)));
        assert!(traits.contains(&MISC_SHARES_VIA_AGGREGATE));
    }

    #[test]
    fn custom_names() {
        assert!(is_custom_name("CUSTOM_FOO_1"));
        assert!(!is_custom_name("CUSTOM_"));
        assert!(!is_custom_name("custom_foo"));
        assert!(!is_custom_name("VCPU"));
        assert!(!is_custom_name(&format!("CUSTOM_{}", "A".repeat(250))));
    }

    #[test]
    fn uuid_like_forms() {
        let u = "a0b15655-273a-4b3d-9792-2e579b7d5ad9";
        assert!(parse_uuid_like(u).is_some());
        assert!(parse_uuid_like("a0b15655273a4b3d97922e579b7d5ad9").is_some());
        assert!(parse_uuid_like("spameggs").is_none());
    }
}

#[cfg(test)]
mod generation_tests {
    use super::GivenGeneration;

    fn given(text: &str) -> GivenGeneration {
        GivenGeneration::from_json(&serde_json::from_str(text).unwrap()).unwrap()
    }

    #[test]
    fn only_the_exact_value_matches_and_is_shown_as_sent() {
        assert!(given("5").matches(5));
        for text in ["4294967301", "9223372036854775808", "-1", "5.0"] {
            assert!(!given(text).matches(5), "{text}");
        }
        assert_eq!(given("4294967301").to_string(), "4294967301");
        assert_eq!(
            given("9223372036854775808").to_string(),
            "9223372036854775808"
        );
        assert_eq!(given("2147483648").to_string(), "2147483648");
    }
}

/// The consumer generation check asked for by the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GenerationCheck {
    /// Before 1.28: no check.
    None,
    /// `null`: the consumer must not exist yet.
    New,
    /// The consumer must exist with this generation.
    Is(GivenGeneration),
}

/// Everything one consumer's write says.
#[derive(Debug, Clone)]
pub struct ConsumerWrite {
    /// The consumer.
    pub consumer: uuid::Uuid,
    /// Owning project.
    pub project_id: String,
    /// Owning user.
    pub user_id: String,
    /// Consumer type to set (None keeps the current one, as before 1.38).
    pub consumer_type: Option<String>,
    /// Generation check.
    pub generation: GenerationCheck,
    /// New allocations (empty: remove the consumer).
    pub allocations: AllocationsByProvider,
    /// The first provider key of the body that is no uuid (the schema's
    /// pattern takes any 36 hex digits and hyphens): a provider that does
    /// not exist, refused after the consumer generation as Placement
    /// refuses it. Its amounts are not in `allocations`.
    pub unparsed_provider: Option<String>,
}

/// Provider → class → units, in the order given: rows are inserted in
/// this order, and a consumer's allocations are read back in it, as
/// Placement answers them.
pub type AllocationsByProvider = indexmap::IndexMap<uuid::Uuid, indexmap::IndexMap<String, i64>>;
