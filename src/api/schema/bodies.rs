//! Request bodies of the Placement routes as typed values. A body is
//! deserialized only after its JSON-schema check passed (the validator's
//! messages are Placement's), so these types hold what the schema allowed:
//! integers arrive range-checked into their types, uuids parsed,
//! generations exact.

use crate::types::Inventory;
use crate::types::{parse_uuid_like, GivenGeneration};
use indexmap::IndexMap;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use utoipa::ToSchema;
use uuid::Uuid;

/// A uuid in any form Placement accepts (dashed or not, braces, `urn:uuid:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct UuidLike(pub Uuid);

impl<'de> Deserialize<'de> for UuidLike {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_uuid_like(&s)
            .map(UuidLike)
            .ok_or_else(|| de::Error::custom(format!("'{s}' is not a 'uuid'")))
    }
}

impl<'de> Deserialize<'de> for GivenGeneration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let n = serde_json::Number::deserialize(d)?;
        GivenGeneration::from_json(&serde_json::Value::Number(n))
            .ok_or_else(|| de::Error::custom("a generation must be a number"))
    }
}

/// A JSON object's entries in body order (Placement reports the first bad
/// entry as the client wrote them).
#[derive(Debug, Clone, Default)]
pub struct Ordered<V>(pub Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Ordered<V> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Entries<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = Ordered<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some((k, v)) = map.next_entry()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(Entries(PhantomData))
    }
}

/// For fields where absent (keep), null (clear) and a value differ.
fn absent_null_or<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// `POST /resource_providers`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ProviderCreate {
    /// Unique name.
    pub name: String,
    /// Chosen uuid (a new one when absent or null).
    #[serde(default)]
    #[schema(value_type = Option<Uuid>)]
    pub uuid: Option<UuidLike>,
    /// Parent provider (1.14+).
    #[serde(default)]
    #[schema(value_type = Option<Uuid>)]
    pub parent_provider_uuid: Option<UuidLike>,
}

/// `PUT /resource_providers/{uuid}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ProviderUpdate {
    /// New name.
    pub name: String,
    /// Absent keeps the parent, null removes it (1.37+), a uuid sets it.
    #[serde(default, deserialize_with = "absent_null_or")]
    #[schema(value_type = Option<Uuid>)]
    pub parent_provider_uuid: Option<Option<UuidLike>>,
}

/// `POST /resource_classes`, `PUT /resource_classes/{name}` (1.2–1.6).
#[derive(Debug, Deserialize, ToSchema)]
pub struct ResourceClassBody {
    /// The (new) name.
    pub name: String,
}

/// `PUT /resource_providers/{uuid}/traits`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ProviderTraitsPut {
    /// The provider generation the client saw.
    #[schema(value_type = i64)]
    pub resource_provider_generation: GivenGeneration,
    /// Every trait the provider is to have.
    pub traits: Vec<String>,
}

/// `PUT /resource_providers/{uuid}/aggregates`: a bare list before 1.19.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AggregatesPut {
    /// 1.19+: with the generation the client saw.
    Checked {
        /// Every aggregate the provider is to be in.
        #[schema(value_type = Vec<Uuid>)]
        aggregates: Vec<UuidLike>,
        /// The provider generation the client saw.
        #[schema(value_type = i64)]
        resource_provider_generation: GivenGeneration,
    },
    /// Before 1.19.
    Bare(BareAggregates),
}

/// Aggregate uuids before 1.19.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = Vec<Uuid>)]
pub struct BareAggregates(pub Vec<UuidLike>);

/// `POST /resource_providers/{uuid}/inventories`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct InventoryCreate {
    /// The class to add.
    pub resource_class: String,
    /// The record.
    #[serde(flatten)]
    pub record: Inventory,
}

/// `PUT /resource_providers/{uuid}/inventories/{rc}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct InventoryUpdate {
    /// The provider generation the client saw.
    #[schema(value_type = i64)]
    pub resource_provider_generation: GivenGeneration,
    /// The record.
    #[serde(flatten)]
    pub record: Inventory,
}

/// `PUT /resource_providers/{uuid}/inventories` (and each provider of a reshape).
#[derive(Debug, Deserialize, ToSchema)]
pub struct InventoriesPut {
    /// The provider generation the client saw.
    #[schema(value_type = i64)]
    pub resource_provider_generation: GivenGeneration,
    /// Every record the provider is to have, by class.
    #[schema(value_type = BTreeMap<String, Inventory>)]
    pub inventories: Ordered<Inventory>,
}

impl InventoriesPut {
    /// The records as (class, inventory), in body order.
    pub fn records(&self) -> Vec<(String, Inventory)> {
        self.inventories
            .0
            .iter()
            .map(|(rc, b)| (rc.clone(), *b))
            .collect()
    }
}

/// One provider's share of a consumer's allocations in the list form (< 1.12).
#[derive(Debug, Deserialize, ToSchema)]
pub struct ListedAllocation {
    /// The provider.
    pub resource_provider: ListedProvider,
    /// Amounts by class, in body order (the order they are written and
    /// answered in).
    pub resources: IndexMap<String, i64>,
}

/// `{"uuid": ...}` of the list form.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ListedProvider {
    /// The provider's uuid, as sent.
    pub uuid: String,
}

/// One provider's share in the dict form (1.12+).
#[derive(Debug, Deserialize, ToSchema)]
pub struct KeyedAllocation {
    /// Amounts by class, in body order (the order they are written and
    /// answered in).
    pub resources: IndexMap<String, i64>,
}

/// Provider uuid → resources, in body order (1.12+).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = BTreeMap<String, KeyedAllocation>)]
pub struct KeyedSet(pub Ordered<KeyedAllocation>);

/// A consumer's allocations in either form.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AllocationSet {
    /// 1.12+: provider uuid → resources.
    Keyed(KeyedSet),
    /// Before 1.12: a list of providers with resources.
    Listed(Vec<ListedAllocation>),
}

/// One consumer's allocation body: `PUT /allocations/{c}`, and each entry
/// of `POST /allocations` and of a reshape.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AllocationsPut {
    /// The allocations (empty: remove the consumer, 1.28+).
    pub allocations: AllocationSet,
    /// Owning project (1.8+).
    #[serde(default)]
    pub project_id: Option<String>,
    /// Owning user (1.8+).
    #[serde(default)]
    pub user_id: Option<String>,
    /// The consumer generation the client saw; null for a new consumer (1.28+).
    #[serde(default)]
    #[schema(value_type = Option<i64>)]
    pub consumer_generation: Option<GivenGeneration>,
    /// Consumer type (1.38+).
    #[serde(default)]
    pub consumer_type: Option<String>,
}

/// `POST /allocations`: several consumers' bodies by consumer uuid.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(transparent)]
#[schema(value_type = BTreeMap<String, AllocationsPut>)]
pub struct AllocationsPost(pub Ordered<AllocationsPut>);

/// `POST /reshaper`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct Reshape {
    /// Every provider whose inventories change, with its full new set.
    #[schema(value_type = BTreeMap<String, InventoriesPut>)]
    pub inventories: Ordered<InventoriesPut>,
    /// Every consumer whose allocations change, with its full new set.
    #[schema(value_type = BTreeMap<String, AllocationsPut>)]
    pub allocations: Ordered<AllocationsPut>,
}

// ---- extensions ----

/// A resize's deltas, after its schema check.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ResizeRequest {
    #[serde(default)]
    pub cpu: f64,
    #[serde(default)]
    pub memory_mb: i64,
    /// Absent keeps the instance's binding mode.
    #[serde(default)]
    pub cpu_bind: Option<bool>,
}

/// `PUT /resource_providers/{uuid}/volumes`, after its schema check.
#[derive(Debug, Deserialize, ToSchema)]
pub struct VolumesBody {
    /// Disk → size in bytes.
    pub volumes: BTreeMap<String, i64>,
    /// Remove or shrink disks instances hold.
    #[serde(default)]
    pub force: bool,
}

/// A topology body, after its schema check.
#[derive(Debug, Deserialize, ToSchema)]
pub struct TopologyBody {
    #[serde(default = "hundred")]
    pub share_base: i32,
    #[serde(default = "unlimited")]
    pub max_fragment_cores: i32,
    pub cores: Vec<CoreBody>,
    #[serde(default)]
    #[schema(value_type = BTreeMap<String, i64>)]
    pub numa_memory_mb: Ordered<i64>,
    #[serde(default)]
    pub force: bool,
}

/// One core of a topology body.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CoreBody {
    pub id: String,
    #[serde(default)]
    pub numa_node: Option<String>,
}

fn hundred() -> i32 {
    100
}

fn unlimited() -> i32 {
    -1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_absence_and_exact_numbers_survive() {
        let b: InventoriesPut = serde_json::from_str(
            r#"{"resource_provider_generation": 4294967301,
                "inventories": {"VCPU": {"total": 8}, "DISK_GB": {"total": 10, "reserved": 2}}}"#,
        )
        .unwrap();
        assert!(!b.resource_provider_generation.matches(5));
        let r = b.records();
        assert_eq!(r[0].0, "VCPU");
        assert_eq!(r[1].1.reserved, 2);
        assert_eq!(r[0].1.max_unit, i32::MAX);
        let keep: ProviderUpdate = serde_json::from_str(r#"{"name": "a"}"#).unwrap();
        let clear: ProviderUpdate =
            serde_json::from_str(r#"{"name": "a", "parent_provider_uuid": null}"#).unwrap();
        assert!(keep.parent_provider_uuid.is_none());
        assert_eq!(clear.parent_provider_uuid, Some(None));
        let too_big: Result<Inventory, _> = serde_json::from_str(r#"{"total": 2147483648}"#);
        assert!(too_big.is_err());
    }
}
