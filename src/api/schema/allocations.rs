//! Allocation bodies (any version's form) turned into the writes the
//! allocation service performs: PUT/POST /allocations and the reshaper.

use crate::api::microversion::Microversion;
use crate::api::schema::bodies::{AllocationSet, AllocationsPut, Ordered};
use crate::config::Settings;
use crate::types::parse_uuid_like;
use crate::types::{AllocationsByProvider, ConsumerWrite, GenerationCheck};
use indexmap::IndexMap;
use uuid::Uuid;

/// Turns one consumer's validated body into a write.
pub fn consumer_write(
    consumer: Uuid,
    body: &AllocationsPut,
    mv: Microversion,
    settings: &Settings,
) -> ConsumerWrite {
    // In body order: Placement writes (and later answers) them so.
    let mut allocations: AllocationsByProvider = AllocationsByProvider::new();
    let mut unparsed_provider: Option<String> = None;
    let mut add = |rp: &str, resources: &IndexMap<String, i64>| {
        let Some(uuid) = parse_uuid_like(rp) else {
            unparsed_provider.get_or_insert_with(|| rp.to_string());
            return;
        };
        let entry = allocations.entry(uuid).or_default();
        for (rc, &n) in resources {
            let sum = entry.entry(rc.clone()).or_default();
            *sum = sum.saturating_add(n);
        }
    };
    match &body.allocations {
        AllocationSet::Listed(list) => {
            for item in list {
                add(&item.resource_provider.uuid, &item.resources);
            }
        }
        AllocationSet::Keyed(map) => {
            for (rp, item) in &map.0 .0 {
                add(rp, &item.resources);
            }
        }
    }
    let owner = |given: &Option<String>, default: &str| {
        given.clone().unwrap_or_else(|| default.to_string())
    };
    ConsumerWrite {
        consumer,
        project_id: owner(&body.project_id, &settings.incomplete_consumer_project_id),
        user_id: owner(&body.user_id, &settings.incomplete_consumer_user_id),
        consumer_type: mv.at_least(1, 38).then(|| owner(&body.consumer_type, "")),
        generation: match &body.consumer_generation {
            _ if !mv.at_least(1, 28) => GenerationCheck::None,
            Some(g) => GenerationCheck::Is(g.clone()),
            None => GenerationCheck::New,
        },
        allocations,
        unparsed_provider,
    }
}

/// Writes from a validated `{consumer: body}` map (POST /allocations, reshaper).
pub fn writes_from_map(
    map: &Ordered<AllocationsPut>,
    mv: Microversion,
    settings: &Settings,
) -> Vec<ConsumerWrite> {
    map.0
        .iter()
        .filter_map(|(c, body)| parse_uuid_like(c).map(|u| consumer_write(u, body, mv, settings)))
        .collect()
}
