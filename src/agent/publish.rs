//! Publishing the tree to the service, generation-safe, as nova-compute's
//! `update_provider_tree` does: each provider found by name (made, with
//! its parent, when missing), and its inventories and traits written only
//! when they differ, so that a second run changes no generation. A 409 (a
//! generation moved under us) is read again and retried, never
//! overwritten blindly.

use super::tree::{Stock, Wanted};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;

/// The microversion the agent speaks (re-parenting needs 1.37).
const MICROVERSION: &str = "placement 1.39";
/// Tries of one write against a moving generation.
const CONFLICT_TRIES: usize = 5;

/// Why a sync stopped.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("the placement service at {0}: {1}")]
    Unreachable(String, String),
    #[error("{method} {path}: {status}: {detail}")]
    Refused {
        method: String,
        path: String,
        status: u16,
        detail: String,
    },
    #[error("{0}: the generation kept moving ({CONFLICT_TRIES} tries)")]
    Conflict(String),
}

/// The service and the token the agent presents.
pub struct Service {
    http: reqwest::Client,
    base: String,
    token: String,
}

/// What one sync changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Changes {
    pub providers_made: usize,
    pub inventories_written: usize,
    pub traits_written: usize,
}

/// `GET /resource_providers?name=…`.
#[derive(Deserialize)]
struct ProviderList {
    resource_providers: Vec<ProviderWire>,
}

#[derive(Deserialize)]
struct ProviderWire {
    uuid: String,
    parent_provider_uuid: Option<String>,
}

/// One inventory record as Placement's body has it.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct InventoryWire {
    total: u64,
    reserved: u64,
    min_unit: u64,
    max_unit: u64,
    step_size: u64,
    allocation_ratio: f64,
}

/// `GET`/`PUT …/inventories`.
#[derive(Serialize, Deserialize)]
struct InventoriesWire {
    resource_provider_generation: u32,
    inventories: BTreeMap<String, InventoryWire>,
}

/// `GET`/`PUT …/traits`.
#[derive(Serialize, Deserialize)]
struct TraitsWire {
    resource_provider_generation: u32,
    traits: Vec<String>,
}

/// Placement's error body.
#[derive(Deserialize)]
struct ErrorsWire {
    errors: Vec<ErrorWire>,
}

#[derive(Deserialize)]
struct ErrorWire {
    detail: String,
}

impl Service {
    pub fn new(base: &str, token: String) -> Result<Service, PublishError> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(30))
            .build()
            .map_err(|e| PublishError::Unreachable(base.to_string(), e.to_string()))?;
        Ok(Service {
            http,
            base: base.trim_end_matches('/').to_string(),
            token,
        })
    }

    /// One request; the status and the body's text.
    async fn call<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
    ) -> Result<(u16, String), PublishError> {
        let mut rb = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", MICROVERSION)
            .header("accept", "application/json");
        if let Some(b) = body {
            rb = rb.json(b);
        }
        let r = rb
            .send()
            .await
            .map_err(|e| PublishError::Unreachable(self.base.clone(), e.to_string()))?;
        let status = r.status().as_u16();
        Ok((status, r.text().await.unwrap_or_default()))
    }

    /// A request whose status must be one of `ok`.
    async fn expect<B: Serialize>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&B>,
        ok: &[u16],
    ) -> Result<String, PublishError> {
        let (status, text) = self.call(method.clone(), path, body).await?;
        if ok.contains(&status) {
            return Ok(text);
        }
        Err(refused(&method, path, status, &text))
    }

    /// A GET of a typed body.
    async fn read<T: for<'de> Deserialize<'de>>(&self, path: &str) -> Result<T, PublishError> {
        let text = self
            .expect::<()>(reqwest::Method::GET, path, None, &[200])
            .await?;
        serde_json::from_str(&text).map_err(|e| PublishError::Refused {
            method: "GET".into(),
            path: path.to_string(),
            status: 200,
            detail: format!("an answer this agent does not read: {e}"),
        })
    }
}

fn refused(method: &reqwest::Method, path: &str, status: u16, text: &str) -> PublishError {
    PublishError::Refused {
        method: method.to_string(),
        path: path.to_string(),
        status,
        detail: serde_json::from_str::<ErrorsWire>(text)
            .ok()
            .and_then(|e| e.errors.into_iter().next())
            .map_or_else(|| "no detail".to_string(), |e| e.detail),
    }
}

/// A provider as the service holds it.
struct Held {
    uuid: String,
}

/// Publishes `tree` (parents first); what it changed.
pub async fn sync(service: &Service, tree: &[Wanted]) -> Result<Changes, PublishError> {
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
    Ok(changes)
}

/// The provider named as `wanted`, made under `parent` when missing and
/// moved under it when elsewhere.
async fn provider(
    service: &Service,
    wanted: &Wanted,
    parent: Option<&str>,
    changes: &mut Changes,
) -> Result<Held, PublishError> {
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("name", &wanted.name)
        .finish();
    let found: ProviderList = service
        .read(&format!("/resource_providers?{query}"))
        .await?;
    if let Some(p) = found.resource_providers.into_iter().next() {
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
    wanted: &BTreeMap<String, Stock>,
) -> Result<bool, PublishError> {
    let path = format!("/resource_providers/{uuid}/inventories");
    for _ in 0..CONFLICT_TRIES {
        let mut held: InventoriesWire = service.read(&path).await?;
        let mut differs = false;
        for (class, stock) in wanted {
            let fresh = InventoryWire {
                total: stock.total,
                reserved: stock.reserved,
                min_unit: 1,
                max_unit: stock.total,
                step_size: 1,
                allocation_ratio: stock.allocation_ratio,
            };
            let record = held.inventories.entry(class.clone()).or_insert_with(|| {
                differs = true;
                fresh.clone()
            });
            let same = record.total == stock.total
                && record.reserved == stock.reserved
                && (record.allocation_ratio - stock.allocation_ratio).abs() < 1e-9;
            if !same {
                differs = true;
                record.total = stock.total;
                record.reserved = stock.reserved;
                // The agent owns these classes: one unit may take all.
                record.max_unit = stock.total.max(1);
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
    Err(PublishError::Conflict(path))
}

/// Adds the wanted traits to the provider's when any is missing (traits
/// another writer set are kept); whether it wrote.
async fn traits(service: &Service, uuid: &str, wanted: &[String]) -> Result<bool, PublishError> {
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
    Err(PublishError::Conflict(path))
}

/// A PUT of a body that carries the generation it was read at: true when
/// written, false when the generation moved meanwhile (409: read again).
async fn put_at_generation<B: Serialize>(
    service: &Service,
    path: &str,
    body: &B,
) -> Result<bool, PublishError> {
    match service.call(reqwest::Method::PUT, path, Some(body)).await? {
        (200, _) => Ok(true),
        (409, _) => Ok(false),
        (status, text) => Err(refused(&reqwest::Method::PUT, path, status, &text)),
    }
}
