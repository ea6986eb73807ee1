//! Allocation bodies (any version's form) turned into the writes the
//! allocation service performs: PUT/POST /allocations and the reshaper.

use crate::api::microversion::Microversion;
use crate::config::Settings;
use crate::db::allocations::{ConsumerWrite, GenerationCheck};
use crate::error::{ApiError, ApiResult};
use crate::types::{parse_uuid_like, GivenGeneration};
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

/// An allocation amount: any JSON integer the schema let through that fits
/// in 64 bits (larger ones are refused, never wrapped or zeroed; amounts
/// over an inventory's max_unit then get Placement's 409).
fn amount(rc: &str, n: &Value) -> ApiResult<i64> {
    n.as_i64().ok_or_else(|| {
        ApiError::bad_request(format!(
            "JSON does not validate: {n} is out of range for resources {rc}"
        ))
    })
}

/// Turns one consumer's validated body (any version's form) into a write.
pub fn consumer_write(
    consumer: Uuid,
    v: &Value,
    mv: Microversion,
    settings: &Settings,
) -> ApiResult<ConsumerWrite> {
    let mut allocations: BTreeMap<Uuid, BTreeMap<String, i64>> = BTreeMap::new();
    let mut add = |rp: Option<Uuid>, resources: &Value| -> ApiResult<()> {
        // Unparseable keys cannot name a provider; nil makes that a 400 later.
        let entry = allocations.entry(rp.unwrap_or(Uuid::nil())).or_default();
        for (rc, n) in resources.as_object().into_iter().flatten() {
            let sum = entry.entry(rc.clone()).or_default();
            *sum = sum.saturating_add(amount(rc, n)?);
        }
        Ok(())
    };
    match &v["allocations"] {
        Value::Array(list) => {
            for item in list {
                add(
                    item["resource_provider"]["uuid"]
                        .as_str()
                        .and_then(parse_uuid_like),
                    &item["resources"],
                )?;
            }
        }
        Value::Object(map) => {
            for (rp, item) in map {
                add(parse_uuid_like(rp), &item["resources"])?;
            }
        }
        _ => {}
    }
    let owner = |k: &str, default: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .unwrap_or(default)
            .to_string()
    };
    Ok(ConsumerWrite {
        consumer,
        project_id: owner("project_id", &settings.incomplete_consumer_project_id),
        user_id: owner("user_id", &settings.incomplete_consumer_user_id),
        consumer_type: mv.at_least(1, 38).then(|| owner("consumer_type", "")),
        generation: match v.get("consumer_generation") {
            _ if !mv.at_least(1, 28) => GenerationCheck::None,
            Some(given) => match GivenGeneration::from_json(given) {
                Some(g) => GenerationCheck::Is(g),
                None => GenerationCheck::New,
            },
            None => GenerationCheck::New,
        },
        allocations,
    })
}

/// Writes from a validated `{consumer: body}` map (POST /allocations, reshaper).
pub fn writes_from_map(
    b: &Value,
    mv: Microversion,
    settings: &Settings,
) -> ApiResult<Vec<ConsumerWrite>> {
    b.as_object()
        .into_iter()
        .flatten()
        .filter_map(|(c, v)| parse_uuid_like(c).map(|u| consumer_write(u, v, mv, settings)))
        .collect()
}
