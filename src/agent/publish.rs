//! Publishing the tree to the service, generation-safe, as nova-compute's
//! `update_provider_tree` does: each provider found by name (made, with
//! its parent, when missing), and its inventories and traits written only
//! when they differ, so that a second run changes no generation. A 409 (a
//! generation moved under us) is read again and retried, never
//! overwritten blindly.

use super::service::{refused, Service, ServiceError, CONFLICT_TRIES};
use super::tree::Wanted;
use crate::types::Inventory;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

/// What one sync changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    /// The node's uuid (the tree's root).
    pub root: String,
    pub providers_made: usize,
    pub inventories_written: usize,
    pub traits_written: usize,
}

/// `GET`/`PUT …/inventories`.
#[derive(Serialize, Deserialize)]
struct InventoriesWire {
    resource_provider_generation: u32,
    inventories: BTreeMap<String, Inventory>,
}

/// `GET`/`PUT …/traits`.
#[derive(Serialize, Deserialize)]
struct TraitsWire {
    resource_provider_generation: u32,
    traits: Vec<String>,
}

/// A provider as the service holds it.
struct Held {
    uuid: String,
}

/// Publishes `tree` (parents first); what it changed.
pub async fn sync(service: &Service, tree: &[Wanted]) -> Result<Changes, ServiceError> {
    let mut changes = Changes::default();
    let mut uuids: Vec<String> = Vec::with_capacity(tree.len());
    for wanted in tree {
        let parent = wanted.parent.and_then(|i| uuids.get(i).cloned());
        let held = provider(service, wanted, parent.as_deref(), &mut changes).await?;
        for class in wanted
            .inventories
            .keys()
            .filter(|c| c.starts_with("CUSTOM_"))
        {
            let path = format!("/resource_classes/{class}");
            service
                .expect::<()>(reqwest::Method::PUT, &path, None, &[201, 204])
                .await?;
        }
        if inventories(service, &held.uuid, &wanted.inventories).await? {
            changes.inventories_written += 1;
        }
        if traits(service, &held.uuid, &wanted.traits).await? {
            changes.traits_written += 1;
        }
        uuids.push(held.uuid);
    }
    changes.root = uuids.first().cloned().unwrap_or_default();
    Ok(changes)
}

/// The provider named as `wanted`, made under `parent` when missing and
/// moved under it when elsewhere.
async fn provider(
    service: &Service,
    wanted: &Wanted,
    parent: Option<&str>,
    changes: &mut Changes,
) -> Result<Held, ServiceError> {
    if let Some(p) = service.provider_named(&wanted.name).await? {
        if p.parent_provider_uuid.as_deref() != parent {
            let path = format!("/resource_providers/{}", p.uuid);
            let body = json!({"name": wanted.name, "parent_provider_uuid": parent});
            service
                .expect(reqwest::Method::PUT, &path, Some(&body), &[200])
                .await?;
        }
        return Ok(Held { uuid: p.uuid });
    }
    let uuid = uuid::Uuid::new_v4().to_string();
    let body = json!({"name": wanted.name, "uuid": uuid, "parent_provider_uuid": parent});
    service
        .expect(
            reqwest::Method::POST,
            "/resource_providers",
            Some(&body),
            &[200],
        )
        .await?;
    changes.providers_made += 1;
    Ok(Held { uuid })
}

/// Writes the inventories when they differ from what is held; whether it
/// wrote. Classes the agent does not own (another writer's) are kept.
async fn inventories(
    service: &Service,
    uuid: &str,
    wanted: &BTreeMap<String, Inventory>,
) -> Result<bool, ServiceError> {
    let path = format!("/resource_providers/{uuid}/inventories");
    for _ in 0..CONFLICT_TRIES {
        let mut held: InventoriesWire = service.read(&path).await?;
        let mut differs = false;
        for (class, stock) in wanted {
            let record = held.inventories.entry(class.clone()).or_insert_with(|| {
                differs = true;
                *stock
            });
            let same = record.total == stock.total
                && record.reserved == stock.reserved
                && (record.allocation_ratio - stock.allocation_ratio).abs() < 1e-9;
            if !same {
                differs = true;
                record.total = stock.total;
                record.reserved = stock.reserved;
                // The agent owns these classes: one unit may take all.
                record.max_unit = stock.max_unit;
                record.allocation_ratio = stock.allocation_ratio;
            }
        }
        if !differs {
            return Ok(false);
        }
        if put_at_generation(service, &path, &held).await? {
            return Ok(true);
        }
    }
    Err(ServiceError::Conflict(path))
}

/// Adds the wanted traits to the provider's when any is missing (traits
/// another writer set are kept); whether it wrote.
async fn traits(service: &Service, uuid: &str, wanted: &[String]) -> Result<bool, ServiceError> {
    let path = format!("/resource_providers/{uuid}/traits");
    for _ in 0..CONFLICT_TRIES {
        let mut held: TraitsWire = service.read(&path).await?;
        let missing: Vec<&String> = wanted.iter().filter(|t| !held.traits.contains(t)).collect();
        if missing.is_empty() {
            return Ok(false);
        }
        held.traits.extend(missing.into_iter().cloned());
        if put_at_generation(service, &path, &held).await? {
            return Ok(true);
        }
    }
    Err(ServiceError::Conflict(path))
}

/// A PUT of a body that carries the generation it was read at: true when
/// written, false when the generation moved meanwhile (409: read again).
async fn put_at_generation<B: Serialize>(
    service: &Service,
    path: &str,
    body: &B,
) -> Result<bool, ServiceError> {
    match service.call(reqwest::Method::PUT, path, Some(body)).await? {
        (200, _) => Ok(true),
        (409, _) => Ok(false),
        (status, text) => Err(refused(&reqwest::Method::PUT, path, status, &text)),
    }
}
